# Style: apex amp (O2) inside a trainer class, with resume through amp.load_state_dict.
import os

import torch
import torch.nn as nn
from apex import amp
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader, device):
        self.device = device
        self.model = model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O2")
        self.loader = loader

    def resume(self, path):
        state = torch.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        amp.load_state_dict(state["amp"])

    def train_epoch(self, epoch):
        total = 0.0
        for x, y in self.loader:
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            with amp.scale_loss(loss, self.optimizer) as scaled:
                scaled.backward()
            self.optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total:.5f}")

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch(epoch)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 6), torch.randn(64, 2))
    loader = DataLoader(data, batch_size=int(os.environ.get("BATCH_SIZE", 64)), shuffle=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    trainer = Trainer(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2)), loader,
                      device)
    if os.environ.get("RESUME"):
        trainer.resume(os.environ["RESUME"])
    trainer.fit(3)
    torch.save(trainer.model.state_dict(), os.environ.get("OUT_PATH", "apex_trainer.pt"))


if __name__ == "__main__":
    main()
