"""A small Faster R-CNN stand-in with torchvision's calling convention: `model(images,
targets)` in training returns a dict of losses, `model(images)` in eval returns one dict
(`boxes`, `labels`, `scores`) per image.

Per image: the backbone's feature vector, a linear classifier (cross-entropy against
each ground-truth box's label) and a linear box regressor (smooth-L1 of the box, its
coordinates divided by the image's size, against each ground-truth box); each loss is
the mean over images of the per-image means, so the loss of a batch is the mean of its
two halves' losses (what the equivalence test needs; torchvision's RPN and ROI sampling
are not modelled). Eval: one box per image (the regressed box), its arg-max class among
the foreground classes and that class's probability."""

import torch
import torch.nn.functional as F
from torch import nn


class FastRCNNPredictor(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, 4)

    def forward(self, x):
        return self.cls_score(x), self.bbox_pred(x)


class FasterRCNN(nn.Module):
    def __init__(self, backbone, num_classes=None, **kwargs):
        super().__init__()
        self.backbone = backbone
        self.box_predictor = FastRCNNPredictor(backbone.out_channels, num_classes)

    def forward(self, images, targets=None):
        if self.training and targets is None:
            raise ValueError("In training mode, targets should be passed")
        outputs, cls_losses, box_losses = [], [], []
        for i, image in enumerate(images):
            height, width = image.shape[-2:]
            scale = image.new_tensor([width, height, width, height])
            logits, box = self.box_predictor(self.backbone(image[None]))
            if self.training:
                target = targets[i]
                labels = target["labels"]
                cls_losses.append(F.cross_entropy(logits.expand(len(labels), -1), labels))
                box_losses.append(F.smooth_l1_loss(
                    box.expand(len(labels), -1), target["boxes"] / scale))
            else:
                prob = logits.softmax(-1)[0]
                score, label = prob[1:].max(0)
                outputs.append({"boxes": (box[0] * scale)[None], "labels": (label + 1)[None],
                                "scores": score[None]})
        if self.training:
            return {"loss_classifier": torch.stack(cls_losses).mean(),
                    "loss_box_reg": torch.stack(box_losses).mean()}
        return outputs
