"""A fake pycocotools (image_captioning): `pycocotools.coco.COCO` only."""
