"""`bentoml.pytorch.save_model`: the only name kfold_bentoml_mnist's train.py calls."""

import os

import torch


class Model:
    def __init__(self, tag, path):
        self.tag = tag
        self.path = path

    def __str__(self):
        return f'Model(tag="{self.tag}", path="{self.path}")'


def save_model(name, model, signatures=None, metadata=None, **_ignored):
    os.makedirs("bentoml_store", exist_ok=True)
    path = os.path.join("bentoml_store", f"{name}.pt")
    torch.save({"model": model.state_dict(), "metadata": metadata}, path)
    with open(os.path.join("bentoml_store", "saves.log"), "a") as log:
        log.write(os.environ.get("RANK", "-") + "\n")
    return Model(f"{name}:fake", path)
