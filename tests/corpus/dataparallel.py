# Style: optional nn.DataParallel wrapping, unwrapped via model.module before saving.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, kernel_size=3, padding=1)
        self.head = nn.Linear(6 * 4 * 4, num_classes)

    def forward(self, x):
        x = F.avg_pool2d(torch.relu(self.conv(x)), 2)
        return self.head(x.flatten(1))


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "dp_model.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    images = torch.randn(64, 3, 8, 8)
    targets = torch.randint(0, 3, (64,))
    loader = DataLoader(TensorDataset(images, targets), batch_size=batch_size, shuffle=True)

    model = SmallConvNet()
    if torch.cuda.device_count() > 1:
        print(f"Using {torch.cuda.device_count()} GPUs with DataParallel")
        model = nn.DataParallel(model)
    model.to(device)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(3):
        model.train()
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.5f}")

    raw = model.module if isinstance(model, nn.DataParallel) else model
    torch.save(raw.state_dict(), out_path)


if __name__ == "__main__":
    main()
