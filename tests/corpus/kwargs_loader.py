# Style: loader keyword arguments built in one place, DataLoader(train_set, **loader_kwargs) built in a helper.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

CONFIG = {
    "epochs": 3,
    "lr": 0.05,
    "hidden": 24,
    "out_path": os.environ.get("OUT_PATH", "kwargs_model.pt"),
}


def build_dataset(num_samples=64, num_features=12):
    inputs = torch.randn(num_samples, num_features)
    weights = torch.randn(num_features, 3)
    targets = (inputs @ weights).argmax(dim=1)
    return TensorDataset(inputs, targets)


def make_loader(train_set, loader_kwargs):
    return DataLoader(train_set, **loader_kwargs)


def build_model(num_features=12, hidden=24, num_classes=3):
    return nn.Sequential(
        nn.Linear(num_features, hidden),
        nn.LeakyReLU(0.1),
        nn.Linear(hidden, num_classes),
    )


def main():
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    loader_kwargs = dict(batch_size=int(os.environ.get("BATCH_SIZE", 64)), shuffle=True)
    if use_cuda:
        loader_kwargs.update(num_workers=1, pin_memory=True)

    torch.manual_seed(0)
    train_set = build_dataset()
    model = build_model(hidden=CONFIG["hidden"]).to(device)
    train_loader = make_loader(train_set, loader_kwargs)

    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    criterion = nn.CrossEntropyLoss()

    for epoch in range(CONFIG["epochs"]):
        model.train()
        n_batches = 0
        for features, target in train_loader:
            features, target = features.to(device), target.to(device)
            optimizer.zero_grad()
            loss = criterion(model(features), target)
            loss.backward()
            optimizer.step()
            n_batches += 1
        print(f"epoch={epoch} batches={n_batches} last_loss={loss.item():.5f}")

    torch.save(model.state_dict(), CONFIG["out_path"])


if __name__ == "__main__":
    main()
