"""A fake `pycocotools.coco.COCO` reading a caption annotation file of COCO's format
(`{"images": [{"id", "file_name"}], "annotations": [{"id", "image_id", "caption"}]}`):
`anns` (annotation id -> annotation, in the file's order) and `loadImgs`."""

from __future__ import annotations

import json
from typing import Any


class COCO:
    def __init__(self, annotation_file: str | None = None) -> None:
        self.anns: dict[Any, dict[str, Any]] = {}
        self.imgs: dict[Any, dict[str, Any]] = {}
        if annotation_file is None:
            return
        with open(annotation_file) as f:
            dataset = json.load(f)
        for image in dataset.get("images", []):
            self.imgs[image["id"]] = image
        for annotation in dataset.get("annotations", []):
            self.anns[annotation["id"]] = annotation

    def loadImgs(self, ids: Any = ()) -> list[dict[str, Any]]:  # noqa: N802 - COCO's name
        if isinstance(ids, (list, tuple)):
            return [self.imgs[i] for i in ids]
        return [self.imgs[ids]]
