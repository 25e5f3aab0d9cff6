"""Data for audio_speaker, run in the run folder (the repository root).

feat_logfbank_nfilt40/train/<speaker>/<utterance>.p: what the tutorial's feature
extraction writes (the repository ships such pickles for its own speakers): a pickled
dict {"feat": float array (n_frames, 40) of log mel filterbank energies, "label":
speaker id}. 4 fake speakers, 71 utterances of 150-260 frames (read_MFB drops 50 frames
at each end: 50-160 frames left, so TruncatedInputfromMFB repeats the short ones to its
100-frame window). train.py's split_train_dev keeps int(71 * 10 / 100) = 7 for
validation and 64 for training: one batch of 64 (its batch_size, a literal) on one
process, 32 per rank on two.
"""

import pickle
from pathlib import Path

import numpy as np

rng = np.random.default_rng(0)
speakers = ["101F0001", "102M0002", "103F0003", "104M0004"]
centres = rng.normal(0.0, 1.0, (len(speakers), 40))
for i in range(71):
    s = i % len(speakers)
    folder = Path("feat_logfbank_nfilt40/train") / speakers[s]
    folder.mkdir(parents=True, exist_ok=True)
    frames = int(rng.integers(150, 261))
    feat = centres[s] + rng.normal(0.0, 1.0, (frames, 40))
    with open(folder / f"UTT{i:03d}_ch01.p", "wb") as f:
        pickle.dump({"feat": feat.astype(np.float64), "label": speakers[s]}, f)
