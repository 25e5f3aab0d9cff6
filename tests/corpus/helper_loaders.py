# Style: get_loaders(batch_size) helper returning (train_loader, test_loader), epoch loop in main, logging module.
import logging
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
logger = logging.getLogger(__name__)


class PatchNet(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, kernel_size=3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def get_loaders(batch_size):
    images = torch.randn(64 + 24, 1, 8, 8)
    labels = (images.mean(dim=(1, 2, 3)) * 8).clamp(-1.99, 1.99).floor().long() + 2
    train_ds = TensorDataset(images[:64], labels[:64])
    test_ds = TensorDataset(images[64:], labels[64:])
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test_ds, batch_size=16, shuffle=False)
    return train_loader, test_loader


def evaluate(model, test_loader, device):
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for x, y in test_loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            total_loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += out.argmax(1).eq(y).sum().item()
    return total_loss / len(test_loader.dataset), correct


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "patchnet.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    logger.info("device=%s batch_size=%d", device, batch_size)

    torch.manual_seed(0)
    train_loader, test_loader = get_loaders(batch_size)
    model = PatchNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.5)

    for epoch in range(3):
        model.train()
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            logger.info("epoch %d step %d loss %.5f", epoch, step, loss.item())
        scheduler.step()
        test_loss, correct = evaluate(model, test_loader, device)
        print(f"EVAL epoch {epoch} loss {test_loss:.5f} acc {correct}/{len(test_loader.dataset)}")

    torch.save(model.state_dict(), out_path)
    logger.info("saved model to %s", out_path)


if __name__ == "__main__":
    main()
