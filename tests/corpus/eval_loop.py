# Style: train + classic single-GPU test loop (sum loss / correct, divide by len(dataset)), EVAL line per epoch.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 4


class Classifier(nn.Module):
    def __init__(self, in_dim=10, hidden=20, num_classes=NUM_CLASSES):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make_split(n, centers):
    labels = torch.randint(0, NUM_CLASSES, (n,))
    points = centers[labels] + 0.8 * torch.randn(n, centers.size(1))
    return TensorDataset(points, labels)


def train_one_epoch(model, loader, optimizer, device):
    model.train()
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
    return loss.item()


def test(model, test_loader, device):
    model.eval()
    test_loss = 0.0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    test_loss /= len(test_loader.dataset)
    return test_loss, correct


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "eval_model.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    centers = 2.0 * torch.randn(NUM_CLASSES, 10)
    train_set = make_split(64, centers)
    test_set = make_split(40, centers)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=16, shuffle=False)

    model = Classifier().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)

    for epoch in range(1, 4):
        train_loss = train_one_epoch(model, train_loader, optimizer, device)
        scheduler.step()
        test_loss, correct = test(model, test_loader, device)
        print(f"train epoch {epoch} loss {train_loss:.5f}")
        print(f"EVAL epoch {epoch} loss {test_loss:.5f} acc {correct}/{len(test_loader.dataset)}")

    torch.save(model.state_dict(), out_path)


if __name__ == "__main__":
    main()
