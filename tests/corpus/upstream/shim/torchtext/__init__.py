"""A stand-in for the few torchtext functions the upstream tutorial uses (torchtext is
retired and downloads WikiText-2): synthetic text, a whitespace tokenizer, a vocab.

Importing it seeds torch (`manual_seed(0)`): the tutorial never seeds, and it imports
torchtext before it builds its model, so every run (and every rank) starts from the same
weights and draws the same dropout masks.
"""

import torch

torch.manual_seed(0)
