"""The preprocessed HAN data that create_input_files.py would write (run by the harness in
the run folder: `setup: python`), under `han data/` (train.py's `data_folder =
'/media/ssd/han data'` is read from there through DISTRUN_SHIM_PATH_MAP):

- word_map.json: '<pad>': 0, 60 words, '<unk>' (as utils.create_input_files builds it);
- TRAIN_data.pth.tar: 64 documents (train.py's hard-coded batch_size 64: one batch per
  epoch), each 1 to 4 sentences of 1 to 6 words, padded to 4 x 6 (upstream: 15 x 20)
  with `sentences_per_document` and `words_per_sentence`, labels 0-9 (the ten classes of
  utils.classes), each class favouring its own six words;
- TEST_data.pth.tar: 16 documents the same way (eval.py's; train.py does not read it);
- word2vec_model: 16-d "pre-trained" vectors (upstream: 200) for 50 of the 60 words, in
  the JSON the project shim's gensim.models.KeyedVectors.load reads (the other words and
  '<pad>'/'<unk>' keep utils.init_embedding's uniform values)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch

SENTENCE_LIMIT, WORD_LIMIT, N_CLASSES, DIM = 4, 6, 10, 16
WORDS = [f"w{i}" for i in range(60)]

rng = np.random.default_rng(0)
folder = pathlib.Path("han data")
folder.mkdir(parents=True, exist_ok=True)
word_map = {"<pad>": 0}
for word in WORDS:
    word_map[word] = len(word_map)
word_map["<unk>"] = len(word_map)
(folder / "word_map.json").write_text(json.dumps(word_map))


def documents(n):
    docs, labels, sentences, words = [], [], [], []
    for i in range(n):
        label = i % N_CLASSES
        own = WORDS[label * 6:label * 6 + 6]
        doc = []
        for _ in range(int(rng.integers(1, SENTENCE_LIMIT + 1))):
            length = int(rng.integers(1, WORD_LIMIT + 1))
            doc.append([own[int(rng.integers(6))] if rng.random() < 0.5
                        else WORDS[int(rng.integers(len(WORDS)))] for _ in range(length)])
        encoded = [[word_map[w] for w in s] + [0] * (WORD_LIMIT - len(s)) for s in doc]
        encoded += [[0] * WORD_LIMIT] * (SENTENCE_LIMIT - len(doc))
        docs.append(encoded)
        labels.append(label)
        sentences.append(len(doc))
        words.append([len(s) for s in doc] + [0] * (SENTENCE_LIMIT - len(doc)))
    return {"docs": docs, "labels": labels, "sentences_per_document": sentences,
            "words_per_sentence": words}


torch.save(documents(64), folder / "TRAIN_data.pth.tar")
torch.save(documents(16), folder / "TEST_data.pth.tar")
vectors = {w: [round(float(x), 6) for x in rng.normal(0, 0.3, DIM)] for w in WORDS[:50]}
(folder / "word2vec_model").write_text(json.dumps({"vector_size": DIM, "vectors": vectors}))
