"""`COCOeval`: per (image, category) the IoU of each detection with each ground truth
(boxes in xywh), a greedy match at IoU 0.5 by score; `accumulate` sums the matches of
the "all" area range; `summarize` prints one line, the precision at IoU 0.5 over all
detections (`stats[0]`)."""

import copy
from collections import defaultdict

import numpy as np


class Params:
    def __init__(self, iouType="bbox"):  # noqa: N803
        self.iouType = iouType
        self.imgIds, self.catIds = [], []
        self.iouThrs = np.array([0.5])
        self.maxDets = [1, 10, 100]
        self.areaRng = [[0, 1e10], [0, 32 ** 2], [32 ** 2, 96 ** 2], [96 ** 2, 1e10]]
        self.areaRngLbl = ["all", "small", "medium", "large"]
        self.useCats = 1
        self.useSegm = None


class COCOeval:
    def __init__(self, cocoGt=None, cocoDt=None, iouType="bbox"):  # noqa: N803
        self.cocoGt, self.cocoDt = cocoGt, cocoDt
        self.params = Params(iouType)
        if cocoGt is not None:
            self.params.imgIds = sorted(cocoGt.getImgIds())
            self.params.catIds = sorted(cocoGt.getCatIds())
        self.evalImgs, self.eval, self.stats = [], {}, np.zeros(1)
        self._paramsEval = copy.deepcopy(self.params)

    def _prepare(self):
        self._gts, self._dts = defaultdict(list), defaultdict(list)
        for ann in self.cocoGt.dataset.get("annotations", []):
            if ann["image_id"] in self.params.imgIds:
                self._gts[ann["image_id"], ann["category_id"]].append(ann)
        for ann in self.cocoDt.dataset.get("annotations", []):
            if ann["image_id"] in self.params.imgIds:
                self._dts[ann["image_id"], ann["category_id"]].append(ann)

    def computeIoU(self, imgId, catId):  # noqa: N802,N803
        gts, dts = self._gts[imgId, catId], self._dts[imgId, catId]
        if not gts or not dts:
            return []
        ious = np.zeros((len(dts), len(gts)))
        for i, d in enumerate(dts):
            for j, g in enumerate(gts):
                dx, dy, dw, dh = d["bbox"]
                gx, gy, gw, gh = g["bbox"]
                iw = max(0.0, min(dx + dw, gx + gw) - max(dx, gx))
                ih = max(0.0, min(dy + dh, gy + gh) - max(dy, gy))
                inter = iw * ih
                union = dw * dh + gw * gh - inter
                ious[i, j] = inter / union if union > 0 else 0.0
        return ious

    def evaluateImg(self, imgId, catId, aRng, maxDet):  # noqa: N802,N803
        gts, dts = self._gts[imgId, catId], self._dts[imgId, catId]
        if not gts and not dts:
            return None
        order = np.argsort([-d["score"] for d in dts], kind="stable")[:maxDet]
        ious = self.ious.get((imgId, catId), [])
        taken, matched = set(), 0
        for i in order:
            if len(ious) == 0:
                break
            free = [j for j in range(len(gts)) if j not in taken]
            if free:
                j = max(free, key=lambda j: ious[i, j])
                if ious[i, j] >= 0.5:
                    taken.add(j)
                    matched += 1
        return {"image_id": imgId, "category_id": catId, "aRng": aRng,
                "matched": matched, "num_dt": len(order), "num_gt": len(gts)}

    def accumulate(self):
        done = [e for e in self.evalImgs if e is not None and e["aRng"] == self.params.areaRng[0]]
        self.eval = {"matched": sum(e["matched"] for e in done),
                     "num_dt": sum(e["num_dt"] for e in done),
                     "num_gt": sum(e["num_gt"] for e in done)}

    def summarize(self):
        dt = self.eval.get("num_dt", 0)
        self.stats = np.array([self.eval["matched"] / dt if dt else -1.0])
        print(" Precision (shim) @[ IoU=0.50 | area=   all | maxDets=100 ] = "
              f"{self.stats[0]:0.3f} ({self.eval.get('num_gt', 0)} ground-truth boxes)")
