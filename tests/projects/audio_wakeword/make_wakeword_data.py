"""Data for audio_wakeword, run in the run folder (the repository root).

VoiceAssistant/wakeword/neuralnet/data/: short 8 kHz 16-bit mono wav clips of varying
length (0.9 to 1.3 s), label 1 (a "wake word": a tone sweeping up, with a little noise)
or 0 (background: noise alone), and the two JSON-lines files train.py reads, in the
format create_wakeword_jsons.py writes (`{"key": PATH, "label": 0 or 1}` per line; the
paths relative to the neuralnet folder, where the runs start): train.json with 8 clips
(one batch of 8 on one process, 4 per rank on two), test.json with 4.
"""

import json
import wave
from pathlib import Path

import numpy as np

RATE = 8000
rng = np.random.default_rng(0)
root = Path("VoiceAssistant/wakeword/neuralnet")


def clip(label: int, seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    noise = rng.normal(0.0, 0.05, t.shape)
    if label:
        tone = 0.4 * np.sin(2 * np.pi * (300 + 400 * t) * t)
        noise = noise + tone
    return (np.clip(noise, -1, 1) * 32767).astype("<i2")


def write(name: str, samples: np.ndarray) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.tobytes())


for split, count in (("train", 8), ("test", 4)):
    lines = []
    for i in range(count):
        label = i % 2
        seconds = float(rng.uniform(0.9, 1.3))
        name = f"data/{label}/{split}{i:02d}.wav"
        write(name, clip(label, seconds))
        lines.append(json.dumps({"key": name, "label": label}))
    (root / "data" / f"{split}.json").write_text("\n".join(lines) + "\n")
