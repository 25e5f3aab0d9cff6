"""Defect: an accelerate script that prepares its model and optimizer but not its loader."""
import os

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    loader = DataLoader(data, batch_size=int(os.environ.get("BATCH_SIZE", 16)), shuffle=True)
    model = nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for epoch in range(3):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        state = accelerator.unwrap_model(model).state_dict()
        torch.save(state, os.environ.get("OUT_PATH", "model.pt"))
    accelerator.end_training()


if __name__ == "__main__":
    main()
