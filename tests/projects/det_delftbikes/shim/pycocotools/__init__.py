"""A small pycocotools for det_delftbikes (the package is not installed): `coco.COCO`
(the index torchvision's coco_utils and coco_eval build and read), `cocoeval.COCOeval`
(the methods coco_eval.py's copied `evaluate()` calls: `_prepare`, `computeIoU`,
`evaluateImg`, then `accumulate` and `summarize`; one number, the precision at IoU 0.5
over all detections, not COCO's 12) and `mask` (names only: the boxes task never
encodes masks)."""
