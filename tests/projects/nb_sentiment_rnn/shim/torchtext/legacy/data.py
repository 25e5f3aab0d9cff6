"""The few classes of torchtext.legacy.data the sentiment notebooks use, written for the
corpus: Field / LabelField (vocab built from a dataset, padding, numericalising),
Example, Dataset (with `split`), Batch and BucketIterator (shuffled batches for
training, sorted batches for evaluation). `tokenize` and `tokenizer_language` are
accepted and ignored: the fake texts are already split on spaces (no spacy here)."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import torch


class Vocab:
    def __init__(self, counter: Counter, specials: list[str], max_size: int | None) -> None:
        self.freqs = counter
        words = sorted((w for w in counter if w not in specials), key=lambda w: (-counter[w], w))
        if max_size is not None:
            words = words[:max_size]
        self.itos = list(specials) + words
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)


class Field:
    def __init__(self, sequential: bool = True, use_vocab: bool = True,
                 dtype: torch.dtype = torch.long, tokenize: Any = None,
                 tokenizer_language: str = "en", batch_first: bool = False,
                 pad_token: str | None = "<pad>", unk_token: str | None = "<unk>",
                 is_target: bool = False, **_: Any) -> None:
        self.sequential, self.use_vocab, self.dtype = sequential, use_vocab, dtype
        self.batch_first, self.is_target = batch_first, is_target
        self.pad_token = pad_token if sequential else None
        self.unk_token = unk_token
        self.vocab: Vocab | None = None

    def preprocess(self, value: Any) -> Any:
        return value.split() if self.sequential and isinstance(value, str) else value

    def build_vocab(self, *sources: Any, max_size: int | None = None, **_: Any) -> None:
        counter: Counter = Counter()
        for source in sources:
            for example in source.examples:
                value = getattr(example, source.field_name(self))
                counter.update(value if self.sequential else [value])
        specials = [t for t in (self.unk_token, self.pad_token) if t is not None]
        self.vocab = Vocab(counter, specials, max_size)

    def _index(self, token: str) -> int:
        assert self.vocab is not None, "build_vocab() first"
        if token in self.vocab.stoi:
            return self.vocab.stoi[token]
        return self.vocab.stoi[self.unk_token] if self.unk_token else 0

    def process(self, values: list[Any]) -> torch.Tensor:
        if not self.sequential:
            return torch.tensor([self._index(v) for v in values], dtype=self.dtype)
        longest = max(len(v) for v in values)
        pad = self._index(str(self.pad_token))
        rows = [[self._index(t) for t in v] + [pad] * (longest - len(v)) for v in values]
        tensor = torch.tensor(rows, dtype=self.dtype)
        return tensor if self.batch_first else tensor.t().contiguous()


class LabelField(Field):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("sequential", False)
        kwargs.setdefault("unk_token", None)
        kwargs.setdefault("is_target", True)
        super().__init__(**kwargs)


class Example:
    @classmethod
    def fromlist(cls, values: list[Any], fields: list[tuple[str, Field]]) -> Example:
        example = cls()
        for (name, field), value in zip(fields, values, strict=True):
            setattr(example, name, field.preprocess(value))
        return example


class Dataset:
    sort_key = None

    def __init__(self, examples: list[Example], fields: list[tuple[str, Field]]) -> None:
        self.examples = examples
        self.fields = dict(fields)

    def field_name(self, field: Field) -> str:
        return next(name for name, f in self.fields.items() if f is field)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]

    def __iter__(self):
        return iter(self.examples)

    def split(self, split_ratio: float = 0.7, stratified: bool = False,
              strata_field: str = "label", random_state: Any = None) -> tuple[Dataset, Dataset]:
        """Shuffled with a copy of Python's global generator (left as it was), as
        torchtext's RandomShuffler does; the first round(ratio * N) for training."""
        rng = random.Random()
        rng.setstate(random_state if random_state is not None else random.getstate())
        order = rng.sample(range(len(self.examples)), len(self.examples))
        cut = int(round(split_ratio * len(order)))
        fields = list(self.fields.items())
        part = [Dataset([self.examples[i] for i in idx], fields)
                for idx in (order[:cut], order[cut:])]
        for dataset in part:
            dataset.sort_key = self.sort_key
        return part[0], part[1]


class Batch:
    def __init__(self, examples: list[Example], dataset: Dataset) -> None:
        self.batch_size = len(examples)
        self.dataset = dataset
        for name, field in dataset.fields.items():
            setattr(self, name, field.process([getattr(e, name) for e in examples]))

    def __len__(self) -> int:
        return self.batch_size


class BucketIterator:
    """Training (`train=True`): the examples shuffled every epoch (a generator copied
    from Python's global one at construction), then cut into batches; evaluation:
    sorted by the dataset's sort_key (stable), never shuffled."""

    def __init__(self, dataset: Dataset, batch_size: int, device: Any = None,
                 train: bool = True, shuffle: bool | None = None, sort: bool | None = None,
                 sort_key: Any = None, **_: Any) -> None:
        self.dataset, self.batch_size, self.train = dataset, batch_size, train
        self.shuffle = train if shuffle is None else shuffle
        self.sort = (not train) if sort is None else sort
        self.sort_key = sort_key or dataset.sort_key
        self._rng = random.Random()
        self._rng.setstate(random.getstate())

    @classmethod
    def splits(cls, datasets: tuple[Dataset, ...], batch_size: int = 1, device: Any = None,
               **kwargs: Any) -> tuple[BucketIterator, ...]:
        return tuple(cls(d, batch_size, device=device, train=(i == 0), **kwargs)
                     for i, d in enumerate(datasets))

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self):
        examples = list(self.dataset.examples)
        if self.shuffle:
            examples = self._rng.sample(examples, len(examples))
        elif self.sort and self.sort_key is not None:
            examples = sorted(examples, key=self.sort_key)
        for start in range(0, len(examples), self.batch_size):
            yield Batch(examples[start:start + self.batch_size], self.dataset)
