"""Writes a fake appendix-D/01_main-chapter-code/the-verdict.txt in the run folder (the
notebook, run from there, reads it when it exists, and downloads it otherwise).

With the byte-level tiktoken stand-in (one token per character) and context_length 16
(GPT_CONFIG_124M rebound by DISTRUN_SHIM_MAIN_GLOBALS), create_dataloader_v1 cuts the
first 90% of the text into windows of 16 tokens with stride 16: 33 training characters
give exactly 2 windows (range(0, 33 - 16, 16)), ONE batch of the hard-coded
batch_size=2 (drop_last=True). The 10% left for validation is shorter than a window: the
validation loader is empty (calc_loss_loader's nan), in both runs.

The two-process run keeps batch_size=2 on each rank (a global batch of 4) and
drop_last=True, so it needs 4 windows: `--copies 2` writes each window twice (65
training characters, windows A, B, B, A). Every window begins with the same character,
which is also the one after its end, so a repeated window has the same input and target.
The mean loss over the four is the mean over A, B: the original's gradient. The order
A, B, B, A: the DistributedSampler's epoch-0 order (randperm(4) seeded 0: [0, 1, 3, 2])
gives rank 0 windows 0 and 3 (A, A) and rank 1 windows 1 and 2 (B, B); with A, A, B, B
both ranks would hold A and B, and launch --check would rightly take the repeated
content for an unsharded loader ([unsharded-data]).
"""
import os
import sys

PATH = os.path.join("appendix-D", "01_main-chapter-code", "the-verdict.txt")

X1 = "he had always t"   # 15 characters each: a window is "|" + X + next "|"
X2 = "hought Jack gis"
TAIL = "burn"             # validation text (once per copy), shorter than one window


def main(argv):
    copies = int(argv[argv.index("--copies") + 1]) if "--copies" in argv else 1
    windows = [X1, X2, X2, X1] if copies == 2 else [X1] * copies + [X2] * copies
    train = "".join("|" + x for x in windows) + "|"
    text = train + TAIL * copies
    # the notebook's split: int(0.90 * len(text)) characters for training
    assert int(0.90 * len(text)) == len(train), (len(text), len(train))
    with open(PATH, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
