"""A fake Hugging Face `transformers` for R-BERT (no weights can be downloaded here, and
the real package is not installed): the names R-BERT imports, with the behaviour of
transformers 3.x that it was written for, around a TINY BERT built from its config.

- `BertConfig.from_pretrained(path, **kwargs)`: a config with HIDDEN (32) hidden units,
  the keyword arguments set as attributes (num_labels, id2label, ...).
- `BertModel(config)`: BERT's interface without attention layers: embeddings (word,
  position, token type, `embeddings.LayerNorm`), the sequence output, and a pooler
  (`pooler.dense` + tanh) over the first token; `forward` returns
  `(sequence_output, pooled_output)`.
- `BertPreTrainedModel`: `from_pretrained(path, *args, config=..., **kwargs)` builds
  `cls(config, *args, **kwargs)` (heads initialised from torch's generator, as the real
  one does) and gives every `bert.*` parameter its "pretrained" value from a generator of
  its own seeded by the path (the same in every process); `save_pretrained(dir)` writes
  `pytorch_model.bin` (the state_dict) and `config.json`; `init_weights()`.
- `BertTokenizer`: whitespace words over a hashed vocabulary ([PAD] 0, [CLS] 1, [SEP] 2,
  [UNK] 3, added special tokens next, words after), `add_special_tokens`, `len()`.
- `AdamW` (torch's) and `get_linear_schedule_with_warmup` (a LambdaLR).
"""

from __future__ import annotations

import json
import os
import zlib

import torch
from torch import nn

VOCAB_SIZE = 1000
MAX_POSITIONS = 512
HIDDEN = 32


class BertConfig:
    def __init__(self, **kwargs):
        self.hidden_size = HIDDEN
        self.vocab_size = VOCAB_SIZE
        self.num_labels = 2
        self.hidden_dropout_prob = 0.1
        for key, value in kwargs.items():
            setattr(self, key, value)

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        config_file = os.path.join(str(path), "config.json")
        values = {}
        if os.path.isfile(config_file):
            with open(config_file) as f:
                values = json.load(f)
        values.update(kwargs)
        return cls(**values)

    def to_dict(self):
        return dict(self.__dict__)


class BertTokenizer:
    pad_token, cls_token, sep_token, unk_token = "[PAD]", "[CLS]", "[SEP]", "[UNK]"
    pad_token_id, cls_token_id, sep_token_id, unk_token_id = 0, 1, 2, 3

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case
        self.added = []

    @classmethod
    def from_pretrained(cls, path, do_lower_case: bool = True, **kwargs):
        return cls(do_lower_case=do_lower_case)

    def add_special_tokens(self, special: dict) -> int:
        new = [t for t in special.get("additional_special_tokens", []) if t not in self.added]
        self.added += new
        return len(new)

    def __len__(self) -> int:
        return VOCAB_SIZE

    def tokenize(self, text: str) -> list[str]:
        words = text.split()
        return [w if w in self.added else (w.lower() if self.do_lower_case else w)
                for w in words]

    def _id(self, token: str) -> int:
        fixed = {self.pad_token: 0, self.cls_token: 1, self.sep_token: 2, self.unk_token: 3}
        if token in fixed:
            return fixed[token]
        if token in self.added:
            return 4 + self.added.index(token)
        first = 4 + 8
        return first + zlib.crc32(token.encode()) % (VOCAB_SIZE - first)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._id(tokens)
        return [self._id(t) for t in tokens]


class _Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(MAX_POSITIONS, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.LayerNorm(x)


class _Pooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden):
        return torch.tanh(self.dense(hidden[:, 0]))


class BertPreTrainedModel(nn.Module):
    def __init__(self, config, *args, **kwargs):
        super().__init__()
        self.config = config

    def init_weights(self):
        pass

    @classmethod
    def from_pretrained(cls, path, *args, config=None, **kwargs):
        if config is None:
            config = BertConfig.from_pretrained(path)
        model = cls(config, *args, **kwargs)
        weights = os.path.join(str(path), "pytorch_model.bin")
        if os.path.isfile(weights):
            model.load_state_dict(torch.load(weights, map_location="cpu"))
            return model
        g = torch.Generator().manual_seed(zlib.crc32(str(path).encode()))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("bert.") or isinstance(model, BertModel):
                    if p.dim() > 1:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        return model

    def save_pretrained(self, save_directory):
        os.makedirs(save_directory, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(save_directory, "pytorch_model.bin"))
        with open(os.path.join(save_directory, "config.json"), "w") as f:
            json.dump(self.config.to_dict(), f)


class BertModel(BertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embeddings = _Embeddings(config)
        self.pooler = _Pooler(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        return hidden, self.pooler(hidden)


class AdamW(torch.optim.AdamW):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0,
                 correct_bias=True):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps,
                                    last_epoch=-1):
    def factor(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step)
                   / max(1, num_training_steps - num_warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch)
