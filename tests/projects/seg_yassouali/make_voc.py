"""Fake Pascal VOC 2012 segmentation data for yassouali/pytorch-segmentation, in the run
folder (python make_voc.py BATCH): the layout its dataloaders/voc.py reads (VOCDataset,
split "train" / "val"), and the config train.py is given (`-c config_voc_unet.json`):

    data/VOCdevkit/VOC2012/ImageSets/Segmentation/{train,val}.txt   the ids, one a line
    data/VOCdevkit/VOC2012/JPEGImages/ID.jpg          16x16x3 uint8 (numpy files: the shim's
    data/VOCdevkit/VOC2012/SegmentationClass/ID.png   16x16 uint8    PIL.Image.open reads them)
    config_voc_unet.json                              the repository's config.json made small

Eight training images (one batch of BATCH = 8 on one process, 4 on each of two ranks) and
four validation images. Each image holds one or two squares of a class among 1-3 on noise;
its label marks them. No VOC "void" (255) pixel: DiceLoss rewrites such pixels of the
target in place (`target[target == self.ignore_index] = target.min()`, utils/losses.py)
after the CrossEntropyLoss has saved it for backward, which today's autograd refuses
("modified by an inplace operation"; PyTorch 1.1, the repository's, did not check).

The config: UNet (the repository's, no backbone), loss CE_DiceLoss, SGD with its
differential_lr (UNet's backbone group is empty), the Poly schedule, 2 epochs, validation
every epoch, a checkpoint every epoch and best_model.pth when the mean IoU improves;
augment off (its random scale, rotation, crop and flip are drawn with `random` in
__getitem__) and num_workers 0.
"""

import json
import sys
from pathlib import Path

import numpy as np

SIZE = 16
SPLITS = {"train": 8, "val": 4}


def config(batch: int) -> dict:
    return {
        "name": "UNet",
        "n_gpu": 1,
        "use_synch_bn": False,
        "arch": {"type": "UNet", "args": {"backbone": "resnet50", "freeze_bn": False,
                                          "freeze_backbone": False}},
        "train_loader": {"type": "VOC", "args": {
            "data_dir": "data", "batch_size": batch, "augment": False, "shuffle": True,
            "split": "train", "num_workers": 0}},
        "val_loader": {"type": "VOC", "args": {
            "data_dir": "data", "batch_size": batch, "crop_size": SIZE, "val": True,
            "split": "val", "num_workers": 0}},
        "optimizer": {"type": "SGD", "differential_lr": True,
                      "args": {"lr": 0.01, "weight_decay": 1e-4, "momentum": 0.9}},
        "loss": "CE_DiceLoss",
        "ignore_index": 255,
        "lr_scheduler": {"type": "Poly", "args": {}},
        "trainer": {"epochs": 2, "save_dir": "saved/", "save_period": 1,
                    "monitor": "max Mean_IoU", "early_stop": 10, "tensorboard": True,
                    "log_dir": "saved/runs", "log_per_iter": 20, "val": True,
                    "val_per_epochs": 1},
    }


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rng = np.random.default_rng(0)
    root = Path("data") / "VOCdevkit" / "VOC2012"
    for sub in ("ImageSets/Segmentation", "JPEGImages", "SegmentationClass"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for split, count in SPLITS.items():
        ids = []
        for i in range(count):
            image_id = f"2007_{split[0]}{i:05d}"
            label = np.zeros((SIZE, SIZE), dtype=np.uint8)
            for _ in range(1 + i % 2):
                y, x = rng.integers(0, SIZE - 7, 2)
                side = int(rng.integers(3, 7))
                label[y:y + side, x:x + side] = 1 + int(rng.integers(0, 3))
            image = rng.integers(0, 80, (SIZE, SIZE, 3))
            for cls in (1, 2, 3):
                image[label == cls] += np.array([60 * cls, 170 - 50 * cls, 100])
            with open(root / "JPEGImages" / f"{image_id}.jpg", "wb") as f:
                np.save(f, image.clip(0, 255).astype(np.uint8))
            with open(root / "SegmentationClass" / f"{image_id}.png", "wb") as f:
                np.save(f, label)
            ids.append(image_id)
        (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("\n".join(ids) + "\n")
    Path("config_voc_unet.json").write_text(json.dumps(config(batch), indent=4) + "\n")


if __name__ == "__main__":
    main()
