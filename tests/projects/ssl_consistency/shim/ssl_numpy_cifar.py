"""ssl_consistency's knob: the fake CIFAR10 keeps its images as a torch tensor, where
torchvision's real one keeps a numpy array (HWC uint8) and a list of targets;
ssl_lib/datasets/utils.py:get_cifar10 calls `.data.astype(np.float32)`. `patch()`
rebinds the module's `CIFAR10` to a subclass that turns both into torchvision's types,
the upstream files unchanged (see project.yaml, env DISTRUN_SHIM_MAIN_GLOBALS)."""

import ssl_lib.datasets.utils as _utils

_Fake = _utils.CIFAR10


class CIFAR10(_Fake):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.data = self.data.numpy()
        self.targets = self.targets.tolist()


def patch():
    _utils.CIFAR10 = CIFAR10
