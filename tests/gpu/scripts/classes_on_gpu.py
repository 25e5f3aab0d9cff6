# Classes of real code whose conversion adds collectives of its own, on the GPU: a GPU
# index read from the command line (`--gpu`), the optimizer built before the model moves
# to it, a model trained through a method of its own (averaged by hand: its broadcast
# and all-reduces), predictions and a loss collected over the training and measured
# after it (gathered and all-reduced). NCCL moves only GPU tensors: each of them must be
# on the rank's GPU. Trains on the CPU where there is no GPU.
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=0)
args = parser.parse_args()
device = torch.device("cuda:" + str(args.gpu) if torch.cuda.is_available() else "cpu")


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        return self.body(x)

    def margin(self, x, other):
        return self.forward(x)[:, 1] - self.forward(other)[:, 1]


torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 6), torch.randint(0, 2, (64,)), torch.randn(64, 6))
loader = DataLoader(data, batch_size=int(os.environ.get("BATCH_SIZE", 64)), shuffle=True)
model = Scorer()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
model.to(device)
for epoch in range(4):
    preds, labels = [], []
    total_loss = 0.0
    for x, y, other in loader:
        x, y, other = x.to(device), y.to(device), other.to(device)
        if epoch % 2 == 0:
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            preds += out.argmax(1).cpu()
        else:
            loss = -nn.functional.logsigmoid(model.margin(x, other)).mean()
            preds += (model.margin(x, other) > 0).long().cpu()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        labels.extend(y.tolist())
    accuracy = sum(int(p) == t for p, t in zip(preds, labels, strict=True)) / len(labels)
    print(f"metrics {epoch} {accuracy:.6f} {total_loss / len(loader):.6f} {len(labels)}")
torch.save(model.state_dict(), os.environ.get("OUT_PATH", "model.pt"))
