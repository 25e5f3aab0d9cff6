"""A single-GPU training script in the style of pytorch/examples' MNIST.

The data is synthetic (random 8x8 "digits" whose class is set by a hidden linear rule),
so the example runs anywhere, offline, in seconds. Convert and run it on 2 processes:

    distrun convert examples/mnist_like.py
    distrun launch --nproc-per-node 2 examples/mnist_like_ddp.py --epochs 3
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, num_classes)
        self.num_classes = num_classes

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def make_data(n, generator):
    images = torch.randn(n, 1, 8, 8, generator=generator)
    rule = torch.randn(64, 4, generator=generator)
    labels = (images.flatten(1) @ rule).argmax(dim=1)
    return TensorDataset(images, labels)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                  f"\tLoss: {loss.item():.6f}")


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f"Test set: Average loss: {test_loss:.4f}, "
          f"Accuracy: {correct}/{len(test_loader.dataset)}")


def main():
    parser = argparse.ArgumentParser(description="synthetic MNIST-like example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=4)
    parser.add_argument("--save-model", default="mnist_like.pt")
    args = parser.parse_args()

    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    generator = torch.Generator().manual_seed(0)
    train_loader = DataLoader(make_data(1024, generator), batch_size=args.batch_size,
                              shuffle=True)
    test_loader = DataLoader(make_data(256, generator), batch_size=256)

    model = Net().to(device)
    print(f"model with {model.num_classes} classes")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    torch.save(model.state_dict(), args.save_model)


if __name__ == "__main__":
    main()
