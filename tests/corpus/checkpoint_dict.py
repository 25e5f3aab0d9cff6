# Style: checkpoint dict (epoch/model/optimizer) saved every epoch, optional resume from RESUME env var.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(8, 16)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def save_checkpoint(path, epoch, model, optimizer):
    torch.save(
        {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        path,
    )


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    ckpt_path = os.environ.get("OUT_PATH", "checkpoint.pt")
    resume_path = os.environ.get("RESUME", "")
    num_epochs = 4
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    data = torch.randn(64, 8)
    target = (data[:, :4].sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(data, target), batch_size=batch_size, shuffle=True)

    model = TwoLayer().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start_epoch = 0

    if resume_path and os.path.isfile(resume_path):
        checkpoint = torch.load(resume_path, map_location=device)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch = checkpoint["epoch"] + 1
        print(f"resumed from {resume_path} at epoch {start_epoch}")

    criterion = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, num_epochs):
        model.train()
        epoch_loss = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        print(f"epoch {epoch}: loss {epoch_loss / len(loader):.5f}")
        save_checkpoint(ckpt_path, epoch, model, optimizer)
        print(f"checkpoint saved to {ckpt_path}")


if __name__ == "__main__":
    main()
