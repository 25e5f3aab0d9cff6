"""Makes image_captioning's data in the run folder: 8 images 8x8 (numpy files the fake
PIL reads), a COCO-format caption file of 8 captions of 3 to 7 words, and data/vocab.pkl
made by the project's own build_vocab.build_vocab (threshold 1), pickled as
`build_vocab.Vocabulary` (what train.py unpickles)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = Path("tutorials/03-advanced/image_captioning")
WORDS = ["a", "dog", "cat", "runs", "on", "grass", "the", "red", "ball", "sits", "man"]


def main() -> None:
    rng = np.random.default_rng(61)
    images = ROOT / "data" / "resized2014"
    images.mkdir(parents=True, exist_ok=True)
    (ROOT / "data" / "annotations").mkdir(parents=True, exist_ok=True)
    dataset: dict[str, list[dict[str, object]]] = {"images": [], "annotations": []}
    for i in range(8):
        name = f"img{i:03d}.jpg"
        with open(images / name, "wb") as f:
            np.save(f, rng.integers(0, 256, (8, 8, 3)).astype(np.uint8))
        words = [WORDS[int(w)] for w in rng.integers(0, len(WORDS), 3 + i % 5)]
        dataset["images"].append({"id": 100 + i, "file_name": name})
        dataset["annotations"].append({"id": 500 + i, "image_id": 100 + i,
                                       "caption": " ".join(words).capitalize() + "."})
    caption_path = ROOT / "data" / "annotations" / "captions_train2014.json"
    caption_path.write_text(json.dumps(dataset))
    sys.path[:0] = [str(HERE / "shim"), str(ROOT)]
    import build_vocab  # the run copy's, with this project's fake nltk and pycocotools

    vocab = build_vocab.build_vocab(json=str(caption_path), threshold=1)
    with open(ROOT / "data" / "vocab.pkl", "wb") as f:
        pickle.dump(vocab, f)


if __name__ == "__main__":
    main()
