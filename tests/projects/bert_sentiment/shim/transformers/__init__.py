"""A fake Hugging Face `transformers` for bert-sentiment (no weights can be downloaded
here, and the real package is not installed): the names that project imports, with the
behaviour of transformers 2.x/3.x that it was written for.

- `BertTokenizer.from_pretrained(path)`: a word-level tokenizer over a hashed vocabulary
  (VOCAB_SIZE ids: [PAD] 0, [CLS] 1, [SEP] 2, words 3...); `encode_plus` returns
  `input_ids`, `token_type_ids`, `attention_mask` padded to `max_length`.
- `BertModel.from_pretrained(path)`: a TINY stand-in for BERT with BERT's interface:
  embeddings (word, position, token type, `embeddings.LayerNorm`) and a pooler
  (`pooler.dense` + tanh) over the masked mean of the embedded tokens, no attention
  layers; hidden size 768 as bert-base (the project's head is `nn.Linear(768, 1)`).
  Its "pretrained" weights come from a generator of its own seeded by the path, the same
  in every process. `forward` returns the tuple `(sequence_output, pooled_output)`.
- `AdamW` (transformers' own, `correct_bias=True`: torch's AdamW) and
  `get_linear_schedule_with_warmup` (a LambdaLR: linear warm-up, then linear decay to 0).
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

VOCAB_SIZE = 1000
MAX_POSITIONS = 512
HIDDEN = 768


class BertTokenizer:
    pad_token_id, cls_token_id, sep_token_id = 0, 1, 2

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    @classmethod
    def from_pretrained(cls, path, do_lower_case: bool = True, **kwargs):
        return cls(do_lower_case=do_lower_case)

    def tokenize(self, text: str) -> list[str]:
        return (text.lower() if self.do_lower_case else text).split()

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [3 + zlib.crc32(t.encode()) % (VOCAB_SIZE - 3) for t in tokens]

    def encode_plus(self, text, text_pair=None, add_special_tokens=True, max_length=None,
                    pad_to_max_length=False, padding=None, truncation=None, **kwargs):
        ids = self.convert_tokens_to_ids(self.tokenize(text))
        pair = self.convert_tokens_to_ids(self.tokenize(text_pair)) if text_pair else []
        if add_special_tokens:
            ids = [self.cls_token_id, *ids, self.sep_token_id]
            pair = [*pair, self.sep_token_id] if pair else []
        types = [0] * len(ids) + [1] * len(pair)
        ids = ids + pair
        if max_length is not None:
            ids, types = ids[:max_length], types[:max_length]
        mask = [1] * len(ids)
        if max_length is not None and (pad_to_max_length or padding == "max_length"):
            pad = max_length - len(ids)
            ids, types, mask = ids + [0] * pad, types + [0] * pad, mask + [0] * pad
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


class _Embeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB_SIZE, HIDDEN)
        self.position_embeddings = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.LayerNorm(x)


class _Pooler(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, hidden, mask):
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return torch.tanh(self.dense(mean))


class BertModel(nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        self.embeddings = _Embeddings()
        self.pooler = _Pooler()
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        return cls(seed=zlib.crc32(str(path).encode()))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        return hidden, self.pooler(hidden, attention_mask)


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
