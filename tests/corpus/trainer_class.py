# Style: a Trainer class that owns model/optimizer/loader/device, with fit(), _run_epoch() and save().
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self, in_features=10, hidden=32):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.body(x).squeeze(-1)


class Trainer:
    def __init__(self, model, optimizer, train_loader, device, max_epochs=3):
        self.device = device
        self.model = model.to(device)
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.max_epochs = max_epochs
        self.loss_fn = nn.MSELoss()
        self.history = []

    def _run_batch(self, inputs, targets):
        self.optimizer.zero_grad()
        preds = self.model(inputs)
        loss = self.loss_fn(preds, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.model.train()
        total, steps = 0.0, 0
        for inputs, targets in self.train_loader:
            inputs = inputs.to(self.device)
            targets = targets.to(self.device)
            total += self._run_batch(inputs, targets)
            steps += 1
        avg = total / steps
        self.history.append(avg)
        print(f"[epoch {epoch}] steps={steps} train_loss={avg:.6f}")

    def fit(self):
        for epoch in range(self.max_epochs):
            self._run_epoch(epoch)

    def save(self, path):
        torch.save(self.model.state_dict(), path)
        print(f"saved weights to {path}")


def make_dataset(n=64, dim=10):
    x = torch.randn(n, dim)
    w = torch.linspace(-1.0, 1.0, dim)
    y = torch.sin(x @ w) + 0.1 * x[:, 0]
    return TensorDataset(x, y)


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "trainer_model.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    dataset = make_dataset()
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model = Regressor()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    trainer = Trainer(model, optimizer, train_loader, device, max_epochs=4)
    trainer.fit()
    trainer.save(out_path)


if __name__ == "__main__":
    main()
