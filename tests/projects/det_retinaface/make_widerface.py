"""Fake WIDER FACE for det_retinaface (biubug6/Pytorch_Retinaface), written in the run
folder (the repository root):

- data/widerface/train/label.txt in the repository's format (retinaface_gt_v1.1: a
  `# SUBFOLDER/NAME.jpg` line per image, then one line per face: `x y w h` and five
  landmarks as `x y 0.0`, then a blur score), and the images under
  data/widerface/train/images/ as numpy arrays saved under `.jpg` names (the project's
  cv2 shim reads them back): 8 images of varying sizes (72-120 pixels a side), 1 to 3
  faces each (20-44 pixels), drawn from a generator of their own (seed 25);
- weights/mobilenetV1X0.25_pretrain.tar, the "ImageNet-pretrained" backbone that
  models/retinaface.py loads when cfg['pretrain'] (cfg_mnet's default): the repository's
  own MobileNetV1 (models/net.py) under manual_seed(0), saved as
  {'state_dict': {'module.' + key: value}} (a DataParallel checkpoint, as the file it
  stands for: retinaface.py strips 7 characters of every key).
"""

import os
import sys
import types

import numpy as np
import torch

IMAGES = 8
rng = np.random.RandomState(25)
root = os.path.join("data", "widerface", "train")
os.makedirs(os.path.join(root, "images", "0--Fake"), exist_ok=True)
lines = []
for i in range(IMAGES):
    h, w = int(rng.randint(72, 121)), int(rng.randint(72, 121))
    image = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
    name = f"0--Fake/0_Fake_{i}.jpg"
    lines.append(f"# {name}")
    for _ in range(int(rng.randint(1, 4))):
        side = int(rng.randint(20, 45))
        x, y = int(rng.randint(0, w - side)), int(rng.randint(0, h - side))
        image[y:y + side, x:x + side] = rng.randint(0, 256, size=3)   # a flat "face"
        marks = []
        for fx, fy in ((0.3, 0.35), (0.7, 0.35), (0.5, 0.55), (0.35, 0.75), (0.65, 0.75)):
            marks += [f"{x + fx * side:.1f}", f"{y + fy * side:.1f}", "0.0"]
        lines.append(" ".join([str(x), str(y), str(side), str(side), *marks, "0.9"]))
    with open(os.path.join(root, "images", name), "wb") as f:
        np.save(f, image)
with open(os.path.join(root, "label.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")

# models/net.py imports torchvision (for names it never uses in MobileNetV1): not
# installed for the harness's interpreter, so empty modules stand in while it imports
for name in ("torchvision", "torchvision.models", "torchvision.models._utils"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.path.insert(0, os.getcwd())
from models.net import MobileNetV1  # noqa: E402

torch.manual_seed(0)
backbone = MobileNetV1()
os.makedirs("weights", exist_ok=True)
torch.save({"state_dict": {"module." + k: v for k, v in backbone.state_dict().items()}},
           os.path.join("weights", "mobilenetV1X0.25_pretrain.tar"))
