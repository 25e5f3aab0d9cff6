# Style: native mixed precision with torch.cuda.amp.autocast / GradScaler, enabled only on CUDA.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=5):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "amp_model.pt")
    use_amp = torch.cuda.is_available()
    device = torch.device("cuda" if use_amp else "cpu")

    torch.manual_seed(0)
    x = torch.randn(64, 16)
    y = torch.randint(0, 5, (64,))
    train_loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)

    model = MLP().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3)
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(3):
        model.train()
        for inputs, labels in train_loader:
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=use_amp):
                logits = model(inputs)
                loss = loss_fn(logits, labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
        print(f"epoch {epoch} loss {loss.item():.5f} lr {scheduler.get_last_lr()[0]:.6f}")

    torch.save(model.state_dict(), out_path)


if __name__ == "__main__":
    main()
