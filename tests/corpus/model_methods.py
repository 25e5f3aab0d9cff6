# Style: model with a custom predict() method and a num_classes attribute, used after the optimizer is built.
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class TextBagClassifier(nn.Module):
    """Bag-of-tokens classifier: EmbeddingBag(mean) -> Linear."""

    def __init__(self, vocab_size=50, embed_dim=8, num_classes=3):
        super().__init__()
        self.num_classes = num_classes
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, mode="mean")
        self.fc = nn.Linear(embed_dim, num_classes)

    def forward(self, tokens):
        return self.fc(self.embedding(tokens))

    @torch.no_grad()
    def predict(self, tokens):
        was_training = self.training
        self.eval()
        preds = self.forward(tokens).argmax(dim=1)
        self.train(was_training)
        return preds


def main():
    batch_size = int(os.environ.get("BATCH_SIZE", 64))
    out_path = os.environ.get("OUT_PATH", "bag_model.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (64, 6))
    labels = tokens[:, 0] % 3
    loader = DataLoader(TensorDataset(tokens, labels), batch_size=batch_size, shuffle=True)

    model = TextBagClassifier().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()

    probe = tokens[:8].to(device)
    print("num_classes:", model.num_classes)
    print("initial predictions:", model.predict(probe).tolist())

    for epoch in range(3):
        for batch_tokens, batch_labels in loader:
            batch_tokens = batch_tokens.to(device)
            batch_labels = batch_labels.to(device)
            optimizer.zero_grad()
            logits = model(batch_tokens)
            assert logits.shape[1] == model.num_classes
            loss = criterion(logits, batch_labels)
            loss.backward()
            optimizer.step()
        hits = (model.predict(tokens.to(device)) == labels.to(device)).sum().item()
        print(f"epoch {epoch} loss {loss.item():.5f} train-acc {hits}/{len(tokens)}")

    torch.save(model.state_dict(), out_path)


if __name__ == "__main__":
    main()
