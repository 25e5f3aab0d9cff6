"""A small stand-in for torchvision's detection models (det_delftbikes): the names
VIPriors' baseline imports (`backbone_utils.resnet_fpn_backbone`,
`faster_rcnn.FasterRCNN`, `mask_rcnn`, `MaskRCNN` and `KeypointRCNN` for
engine._get_iou_types' isinstance checks). See faster_rcnn.py for what it computes."""

from torchvision.models.detection import backbone_utils, faster_rcnn, mask_rcnn  # noqa: F401
from torchvision.models.detection.faster_rcnn import FasterRCNN  # noqa: F401
from torchvision.models.detection.mask_rcnn import KeypointRCNN, MaskRCNN  # noqa: F401
