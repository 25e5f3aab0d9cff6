"""Names only (coco_utils / coco_eval import them; the boxes task never calls them)."""


def _missing(name):
    def call(*args, **kwargs):
        raise RuntimeError(f"the projects' shim has no pycocotools.mask.{name}")
    return call


encode = _missing("encode")
decode = _missing("decode")
area = _missing("area")
toBbox = _missing("toBbox")  # noqa: N816
frPyObjects = _missing("frPyObjects")  # noqa: N816
