"""A fake `pretrainedmodels` (Cadene/pretrained-models.pytorch, not installed here):
main.py imports it at the top for `--net_type inception/xception`, which the corpus does
not run; a builder called says so."""


def _missing(name):
    def builder(*args, **kwargs):
        raise NotImplementedError(f"the distrun project shim has no pretrainedmodels.{name}")

    builder.__name__ = name
    return builder


inceptionv3 = _missing("inceptionv3")
xception = _missing("xception")
