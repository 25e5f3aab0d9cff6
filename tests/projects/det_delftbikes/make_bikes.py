"""Fake DelftBikes for det_delftbikes (VIPriors' object-detection baseline), written in
the run folder under object-detection/data, the layout DelftBikeDataset reads
(dataset/bike_dataset.py: `root/<mode>/` images sorted by name and
`root/<json>` mapping each image's name to `{"parts": {name: {"object_state",
"absolute_bounding_box": {"left", "top", "width", "height"}}}}`; a part's label is its
position among the image's parts + 1, absent parts are dropped):

- train/ (4 images) + train_annotations.json, test/ (2 images) +
  fake_test_annotations.json (upstream's default `--test_json`, `--eval_mode test`);
- images of 40 x 56 pixels, numpy arrays saved under `.jpg` names (the shared PIL shim's
  Image.open reads them back); four parts each ("front_wheel", "back_wheel", "saddle",
  "handle_bar"), each intact, damaged, occluded or absent, never all absent; drawn from
  a generator of their own (seed 26).
"""

import json
import os

import numpy as np

rng = np.random.RandomState(26)
ROOT = os.path.join("object-detection", "data")
PARTS = ["front_wheel", "back_wheel", "saddle", "handle_bar"]
STATES = ["intact", "damaged", "occluded", "absent"]
HEIGHT, WIDTH = 40, 56


def split(mode: str, json_name: str, count: int) -> None:
    os.makedirs(os.path.join(ROOT, mode), exist_ok=True)
    labels = {}
    for i in range(count):
        name = f"{mode}_{i:04d}.jpg"
        with open(os.path.join(ROOT, mode, name), "wb") as f:
            np.save(f, rng.randint(0, 256, (HEIGHT, WIDTH, 3)).astype(np.uint8))
        states = [STATES[int(s)] for s in rng.randint(0, 4, len(PARTS))]
        if all(s == "absent" for s in states):
            states[0] = "intact"
        parts = {}
        for part, state in zip(PARTS, states, strict=True):
            left, top = int(rng.randint(0, WIDTH // 2)), int(rng.randint(0, HEIGHT // 2))
            width = int(rng.randint(6, WIDTH - left))
            height = int(rng.randint(6, HEIGHT - top))
            parts[part] = {"object_state": state, "absolute_bounding_box": {
                "left": left, "top": top, "width": width, "height": height}}
        labels[name] = {"parts": parts}
    with open(os.path.join(ROOT, json_name), "w") as f:
        json.dump(labels, f)


split("train", "train_annotations.json", 4)
split("test", "fake_test_annotations.json", 2)
