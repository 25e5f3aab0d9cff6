# Style: heavy commenting, trailing comments, blank lines, parenthesised multi-line calls, backslash continuations.
"""Train a tiny linear classifier on synthetic data.

This module deliberately has comments on almost every line and some
unusual-but-valid formatting, to exercise the converter's source handling.
"""

import os  # environment variables
import torch  # the framework
import torch.nn as nn  # layers

from torch.utils.data import (  # data utilities
    DataLoader,  # batching
    TensorDataset,  # in-memory dataset
)


# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------

BATCH_SIZE = int(os.environ.get("BATCH_SIZE", 64))  # samples per step
OUT_PATH = os.environ.get("OUT_PATH", "commented.pt")  # where weights go
EPOCHS = 3  # number of passes over the data
LR = 0.1  # learning rate


def main():  # entry point
    """Build data, model, optimizer; train; save."""
    # pick the device: a single GPU if present
    device = torch.device(
        "cuda"  # preferred
        if torch.cuda.is_available()  # only when present
        else "cpu"  # fallback
    )

    torch.manual_seed(0)  # make everything reproducible

    # --- data ---
    xs = torch.randn(64, 5)  # 64 samples, 5 features
    ys = (xs[:, 0] * 2.0 - xs[:, 1] + 0.5 * xs[:, 2] > 0) \
        .long()  # binary labels from a linear rule
    dataset = TensorDataset(xs, ys)  # wrap tensors

    loader = DataLoader(  # the training loader
        dataset,  # what to load
        batch_size=BATCH_SIZE,  # how many per batch
        shuffle=True,  # new order every epoch
    )  # end DataLoader

    # --- model ---
    model = nn.Sequential(nn.Linear(5, 8),  # hidden layer
                          nn.Sigmoid(),  # smooth nonlinearity
                          nn.Linear(8, 2))  # logits
    model = model.to(device)  # move to device

    # --- optimisation ---
    optimizer = torch.optim.SGD(model.parameters(),  # all parameters
                                lr=LR)  # fixed step size
    loss_fn = nn.CrossEntropyLoss()  # mean reduction

    # --- training loop ---
    for epoch in range(EPOCHS):  # epochs

        model.train()  # training mode

        for batch_x, batch_y in loader:  # iterate batches
            batch_x = batch_x.to(device)  # inputs to device
            batch_y = batch_y.to(device)  # labels to device

            optimizer.zero_grad()  # clear old grads
            loss = loss_fn(model(batch_x),  # forward pass
                           batch_y)  # compare with labels
            loss.backward()  # backprop
            optimizer.step()  # update weights

        print("epoch", epoch,  # which epoch
              "loss", round(loss.item(), 5))  # last batch loss

    # --- save ---
    torch.save(model.state_dict(),  # plain state dict
               OUT_PATH)  # destination


if __name__ == "__main__":  # script entry
    main()  # run it
