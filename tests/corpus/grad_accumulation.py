# Style: gradient accumulation: 2 micro-batches per optimizer step, loss divided by the count.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUM_STEPS = 2
BATCH_SIZE = int(os.environ.get("BATCH_SIZE", 64))


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 5)
    y = x @ torch.randn(5, 1) + 0.1
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE // ACCUM_STEPS, shuffle=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(3):
        optimizer.zero_grad()
        for step, (inputs, targets) in enumerate(loader):
            inputs, targets = inputs.to(device), targets.to(device)
            # one micro-batch: its share of the step's mean loss
            loss = F.mse_loss(model(inputs), targets) / ACCUM_STEPS
            loss.backward()
            if (step + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch} last micro-batch loss {loss.item():.5f}")
    torch.save(model.state_dict(), os.environ.get("OUT_PATH", "grad_accumulation.pt"))


if __name__ == "__main__":
    main()
