"""Fake data for asr_voice100 (run in the run folder): the two index/data file pairs
train_ctc.py reads, `data/css10ja-text-16000.{idx,bin}` (phoneme ids, int8) and
`data/css10ja-audio-16000.{idx,bin}` (27-dim float32 frames), as voice100_tts/data.py's
IndexDataFileWriter writes them (.idx: the cumulative end offset of each record in
bytes, int64; .bin: the records' bytes). 144 utterances: random_split(ds, [128, 16])
keeps 128 for training, one batch of the script's literal 128. Lengths vary (frames
24..40, phonemes 4..10, ids 1..46, never the blank 0), so the collate's padding and
pack_sequence's lengths are exercised."""

import os

import numpy as np

N, AUDIO_DIM, VOCAB = 144, 27, 47


def write(prefix, records):
    ends, blob, total = [], [], 0
    for record in records:
        data = record.tobytes()
        total += len(data)
        ends.append(total)
        blob.append(data)
    np.array(ends, dtype=np.int64).tofile(prefix + ".idx")
    with open(prefix + ".bin", "wb") as f:
        f.write(b"".join(blob))


def main():
    rng = np.random.default_rng(20)
    os.makedirs("data", exist_ok=True)
    texts, audios = [], []
    for _ in range(N):
        texts.append(rng.integers(1, VOCAB, size=int(rng.integers(4, 11))).astype(np.int8))
        frames = int(rng.integers(24, 41))
        audios.append(rng.standard_normal((frames, AUDIO_DIM)).astype(np.float32))
    write("data/css10ja-text-16000", texts)
    write("data/css10ja-audio-16000", audios)


if __name__ == "__main__":
    main()
