"""What prune_lottery's DISTRUN_SHIM_MAIN_GLOBALS rebinds (its upstream files unchanged).

main.py builds its LeNet inside main() and saves nothing, so DISTRUN_SHIM_CAPTURE (which
reads `__main__`'s globals) cannot see it: `recording(LeNet)` is a subclass (same
modules, same state_dict keys) whose __init__ also binds the new model to `__main__`'s
global `model`, the name the capture saves.
"""

import sys


def recording(cls):
    class Recorded(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sys.modules["__main__"].model = self

    Recorded.__name__ = cls.__name__
    Recorded.__qualname__ = cls.__qualname__
    return Recorded
