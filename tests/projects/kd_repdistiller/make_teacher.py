"""Writes the "pretrained" teacher RepDistiller's train_student.py loads with
`--path_t`: `save/models/resnet14_vanilla/ckpt_epoch_240.pth`, a dict {'model':
state_dict} as train_teacher.py saves it (the teacher's name is read from the folder's
name: `resnet14`). The weights come from the repository's own resnet14 built under a
fixed seed (run in the run folder, whose `models` package is the repository's), so both
runs load the same teacher."""

import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from models import model_dict  # noqa: E402

torch.manual_seed(14)
teacher = model_dict["resnet14"](num_classes=100)
folder = os.path.join("save", "models", "resnet14_vanilla")
os.makedirs(folder, exist_ok=True)
torch.save({"epoch": 240, "model": teacher.state_dict()},
           os.path.join(folder, "ckpt_epoch_240.pth"))
