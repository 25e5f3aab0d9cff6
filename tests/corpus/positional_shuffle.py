# Style: custom Dataset subclass, DataLoader(ds, batch_size, True) with shuffle passed positionally.
import math
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SineDataset(Dataset):
    """Noisy samples of y = sin(a*x) + cos(b*x) for a handful of (a, b)."""

    def __init__(self, n=64):
        self.x = torch.rand(n, 1) * 2 * math.pi
        self.params = torch.rand(n, 2) + 0.5
        a, b = self.params[:, :1], self.params[:, 1:]
        self.y = torch.sin(a * self.x) + torch.cos(b * self.x)

    def __len__(self):
        return self.x.size(0)

    def __getitem__(self, idx):
        inputs = torch.cat([self.x[idx], self.params[idx]])
        return inputs, self.y[idx]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(3, 32), nn.Softplus(), nn.Linear(32, 16), nn.Softplus(), nn.Linear(16, 1)
        )

    def forward(self, x):
        return self.layers(x)


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "sine_model.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    ds = SineDataset(64)
    loader = DataLoader(ds, batch_size, True)

    net = Net().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)
    mse = nn.MSELoss()

    for epoch in range(5):
        net.train()
        for inp, tgt in loader:
            inp, tgt = inp.to(device), tgt.to(device)
            opt.zero_grad()
            loss = mse(net(inp), tgt)
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: mse {loss.item():.5f}")

    torch.save(net.state_dict(), out_path)


if __name__ == "__main__":
    main()
