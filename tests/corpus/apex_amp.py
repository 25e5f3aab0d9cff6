# Style: an old script written against NVIDIA apex amp (O1), with amp state in its checkpoint.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from apex import amp
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = int(os.environ.get("BATCH_SIZE", 64))
OUT_PATH = os.environ.get("OUT_PATH", "apex_amp.pt")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.fc2 = nn.Linear(24, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 12)
    y = (x[:, :3] * torch.tensor([1.0, -1.0, 0.5])).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for epoch in range(4):
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            output = model(inputs)
            loss = F.cross_entropy(output, targets)
            # apex scales the loss to avoid fp16 underflow
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.5f}")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "amp": amp.state_dict()}, OUT_PATH)


if __name__ == "__main__":
    main()
