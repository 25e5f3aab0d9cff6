"""gensim.models: KeyedVectors (gensim 3's interface, from a JSON file) and word2vec."""

import json

import numpy as np

from . import word2vec  # noqa: F401


class KeyedVectors:
    def __init__(self, vector_size, vectors):
        self.vector_size = vector_size
        self.vocab = {word: i for i, word in enumerate(vectors)}
        self._vectors = {w: np.asarray(v, dtype=np.float32) for w, v in vectors.items()}

    @classmethod
    def load(cls, fname, mmap=None):
        # `open`: the path is the script's '/media/ssd/han data/word2vec_model', read from
        # the run folder through the shared shim's DISTRUN_SHIM_PATH_MAP
        with open(fname, encoding="utf-8") as f:
            data = json.load(f)
        return cls(data["vector_size"], data["vectors"])

    def __getitem__(self, word):
        return self._vectors[word]
