# Style: flat top-level script with no functions and no main guard.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
batch_size = int(os.environ.get("BATCH_SIZE", 64))
out_path = os.environ.get("OUT_PATH", "model.pt")
epochs = 3

torch.manual_seed(0)

# two gaussian blobs -> binary classification
x0 = torch.randn(32, 6) + 1.0
x1 = torch.randn(32, 6) - 1.0
features = torch.cat([x0, x1])
labels = torch.cat([torch.zeros(32), torch.ones(32)])
train_data = TensorDataset(features, labels)
train_loader = DataLoader(train_data, batch_size=batch_size, shuffle=True)

model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1)).to(device)
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)

for epoch in range(epochs):
    model.train()
    running = 0.0
    for xb, yb in train_loader:
        xb, yb = xb.to(device), yb.to(device)
        logits = model(xb).squeeze(1)
        loss = criterion(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss.item() * xb.size(0)
    print(f"epoch {epoch + 1}/{epochs} loss {running / len(train_loader.dataset):.5f}")

torch.save(model.state_dict(), out_path)
print("done, weights written to", out_path)
