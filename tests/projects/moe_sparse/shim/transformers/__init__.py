"""A fake transformers for moe_sparse, names only: moe/__init__.py imports
moe/hf_wrapper.py, whose classes subclass PretrainedConfig and PreTrainedModel at
import time; train.py never builds them (transformers is not installed here)."""

import torch.nn as nn


class PretrainedConfig:
    model_type = ""

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)


class PreTrainedModel(nn.Module):
    config_class = PretrainedConfig

    def __init__(self, config, *args, **kwargs):
        super().__init__()
        self.config = config

    def post_init(self):
        pass
