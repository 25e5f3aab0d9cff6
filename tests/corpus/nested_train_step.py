# Style: explicit train_step()/evaluate() functions, epoch loop inside run(cfg: dict), model_state_dict checkpoint.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ResidualMLP(nn.Module):
    def __init__(self, dim=8, num_classes=3):
        super().__init__()
        self.inp = nn.Linear(dim, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        self.out = nn.Linear(16, num_classes)

    def forward(self, x):
        h = F.relu(self.inp(x))
        h = h + self.block(h)
        return self.out(h)


def train_step(model, batch, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item()


def evaluate(model, loader):
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            total += F.cross_entropy(model(inputs), targets, reduction="sum").item()
    model.train()
    return total / len(loader.dataset)


def run(cfg: dict):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg["seed"])

    x = torch.randn(64 + 32, 8)
    y = torch.bucketize(x[:, 0] + x[:, 1], torch.tensor([-0.5, 0.5]))
    train_loader = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=cfg["batch_size"], shuffle=True)
    val_loader = DataLoader(TensorDataset(x[64:], y[64:]), batch_size=16, shuffle=False)

    model = ResidualMLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)

    for epoch in range(cfg["epochs"]):
        model.train()
        losses = []
        for batch in train_loader:
            batch = [t.to(device) for t in batch]
            losses.append(train_step(model, batch, optimizer))
        val_loss = evaluate(model, val_loader)
        print(f"epoch {epoch} train {sum(losses) / len(losses):.5f}")
        print(f"EVAL epoch {epoch} loss {val_loss:.5f}")

    torch.save({"model_state_dict": model.state_dict()}, cfg["out_path"])
    return model


if __name__ == "__main__":
    config = {
        "seed": 0,
        "epochs": 3,
        "lr": 0.05,
        "batch_size": int(os.environ.get("BATCH_SIZE", 64)),
        "out_path": os.environ.get("OUT_PATH", "nested.pt"),
    }
    run(config)
