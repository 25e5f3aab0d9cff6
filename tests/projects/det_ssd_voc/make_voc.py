"""Fake PASCAL VOC for det_ssd_voc (qfgaohao/pytorch-ssd), written in the run folder in
the layout of upstream's README (`--datasets VOC0712/VOC2007 VOC0712/VOC2012
--validation_dataset VOC0712/test/VOC2007 --base_net models/mobilenet_v1_with_relu_69_5.pth`):

- data/VOC0712/VOC2007 and data/VOC0712/VOC2012 (4 training images each, their ids in
  ImageSets/Main/trainval.txt) and data/VOC0712/test/VOC2007 (2 images,
  ImageSets/Main/test.txt): Annotations/ID.xml in VOC's format (<object><name>,
  <difficult>, <bndbox> xmin/ymin/xmax/ymax, 1-based) and JPEGImages/ID.jpg, numpy arrays
  saved under `.jpg` names (the cv2 shim reads them back); images of 64-112 pixels a
  side, 1 to 3 objects each of two classes (each root's labels.txt, "cat,dog", which
  VOCDataset reads as its class names after BACKGROUND), drawn from a generator of their
  own (seed 15); one training object is marked difficult (dropped: keep_difficult=False);
- models/mobilenet_v1_with_relu_69_5.pth, the "ImageNet-pretrained" base net that
  `--base_net` loads into `net.base_net` (strict): the repository's own MobileNetV1
  (vision/nn/mobilenet.py) `.model` under manual_seed(0).
"""

import os
import sys

import numpy as np
import torch

rng = np.random.RandomState(15)
serial = 0


def voc_root(root: str, split: str, count: int) -> None:
    global serial
    for sub in ("Annotations", "ImageSets/Main", "JPEGImages"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    with open(os.path.join(root, "labels.txt"), "w") as f:
        f.write("cat,dog\n")
    ids = []
    for _ in range(count):
        image_id = f"{serial:06d}"
        serial += 1
        ids.append(image_id)
        h, w = int(rng.randint(64, 113)), int(rng.randint(64, 113))
        image = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
        objects = []
        for k in range(int(rng.randint(1, 4))):
            bw, bh = int(rng.randint(20, w // 2 + 10)), int(rng.randint(20, h // 2 + 10))
            x1, y1 = int(rng.randint(0, w - bw)), int(rng.randint(0, h - bh))
            image[y1:y1 + bh, x1:x1 + bw] = rng.randint(0, 256, size=3)
            name = ("cat", "dog")[int(rng.randint(0, 2))]
            difficult = 1 if (image_id == "000003" and k == 1) else 0
            objects.append(f"""  <object>
    <name>{name}</name>
    <pose>Unspecified</pose>
    <truncated>0</truncated>
    <difficult>{difficult}</difficult>
    <bndbox>
      <xmin>{x1 + 1}</xmin>
      <ymin>{y1 + 1}</ymin>
      <xmax>{x1 + bw}</xmax>
      <ymax>{y1 + bh}</ymax>
    </bndbox>
  </object>""")
        with open(os.path.join(root, "JPEGImages", image_id + ".jpg"), "wb") as f:
            np.save(f, image)
        with open(os.path.join(root, "Annotations", image_id + ".xml"), "w") as f:
            f.write(f"""<annotation>
  <folder>VOC</folder>
  <filename>{image_id}.jpg</filename>
  <size><width>{w}</width><height>{h}</height><depth>3</depth></size>
{chr(10).join(objects)}
</annotation>
""")
    with open(os.path.join(root, "ImageSets", "Main", split + ".txt"), "w") as f:
        f.write("\n".join(ids) + "\n")


voc_root(os.path.join("data", "VOC0712", "VOC2007"), "trainval", 4)
voc_root(os.path.join("data", "VOC0712", "VOC2012"), "trainval", 4)
voc_root(os.path.join("data", "VOC0712", "test", "VOC2007"), "test", 2)

sys.path.insert(0, os.getcwd())
from vision.nn.mobilenet import MobileNetV1  # noqa: E402

torch.manual_seed(0)
os.makedirs("models", exist_ok=True)
torch.save(MobileNetV1(1001).model.state_dict(),
           os.path.join("models", "mobilenet_v1_with_relu_69_5.pth"))
