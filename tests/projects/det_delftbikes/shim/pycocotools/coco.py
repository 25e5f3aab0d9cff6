"""`COCO`: `dataset`, `createIndex()` (anns, imgs, cats, imgToAnns, catToImgs),
`getImgIds`, `getCatIds`, `getAnnIds`, `loadAnns`."""

from collections import defaultdict


class COCO:
    def __init__(self, annotation_file=None):
        self.dataset = {}
        self.anns, self.imgs, self.cats = {}, {}, {}
        self.imgToAnns, self.catToImgs = defaultdict(list), defaultdict(list)
        if annotation_file is not None:
            import json
            with open(annotation_file) as f:
                self.dataset = json.load(f)
            self.createIndex()

    def createIndex(self):  # noqa: N802 - pycocotools' name
        self.anns, self.imgs, self.cats = {}, {}, {}
        self.imgToAnns, self.catToImgs = defaultdict(list), defaultdict(list)
        for ann in self.dataset.get("annotations", []):
            self.imgToAnns[ann["image_id"]].append(ann)
            self.anns[ann["id"]] = ann
        for img in self.dataset.get("images", []):
            self.imgs[img["id"]] = img
        for cat in self.dataset.get("categories", []):
            self.cats[cat["id"]] = cat
        for ann in self.dataset.get("annotations", []):
            self.catToImgs[ann.get("category_id")].append(ann["image_id"])

    def getImgIds(self):  # noqa: N802
        return list(self.imgs)

    def getCatIds(self):  # noqa: N802
        return list(self.cats)

    def getAnnIds(self, imgIds=(), catIds=()):  # noqa: N802,N803
        imgs = list(imgIds) if isinstance(imgIds, (list, tuple)) else [imgIds]
        cats = set(catIds if isinstance(catIds, (list, tuple)) else [catIds])
        anns = [a for i in imgs for a in self.imgToAnns[i]] if imgs else list(self.anns.values())
        return [a["id"] for a in anns if not cats or a["category_id"] in cats]

    def loadAnns(self, ids=()):  # noqa: N802
        return [self.anns[i] for i in (ids if isinstance(ids, (list, tuple)) else [ids])]
