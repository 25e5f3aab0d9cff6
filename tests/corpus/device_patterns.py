# Style: integer device index (device = 0), torch.device("cuda:0"), guarded .cuda() calls, tensors moved in the loop.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = 0
batch_size = int(os.environ.get("BATCH_SIZE", 64))
out_path = os.environ.get("OUT_PATH", "device_model.pt")


class Autoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 12))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def main():
    if torch.cuda.is_available():
        torch.cuda.set_device(device)
        dev = torch.device("cuda:0")
    else:
        dev = torch.device("cpu")

    torch.manual_seed(0)
    latent = torch.randn(64, 3)
    mixing = torch.randn(3, 12)
    samples = torch.tanh(latent @ mixing)
    loader = DataLoader(TensorDataset(samples), batch_size=batch_size, shuffle=True)

    model = Autoencoder()
    if torch.cuda.is_available():
        model.cuda()
    criterion = nn.MSELoss()
    if torch.cuda.is_available():
        criterion = criterion.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)

    for epoch in range(4):
        model.train()
        for (batch,) in loader:
            if torch.cuda.is_available():
                batch = batch.cuda(device, non_blocking=True)
            else:
                batch = batch.to(dev)
            recon = model(batch)
            loss = criterion(recon, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} reconstruction loss {loss.item():.6f}")

    torch.save(model.state_dict(), out_path)


if __name__ == "__main__":
    main()
