"""A fake bentoml for kfold_bentoml_mnist: the model store is a folder of the run.

`bentoml.pytorch.save_model(name, model, signatures=..., metadata=...)` writes
`bentoml_store/<name>.pt`, a dict with the model's state_dict ("model") and the
metadata; every call also appends one line (the process's RANK, or "-") to
`bentoml_store/saves.log`, so a run shows how many processes saved.
"""

from . import pytorch  # noqa: F401
