"""A fake NVIDIA apex for yangkky/distributed_tutorial's mnist-distributed.py, which
imports `apex.parallel.DistributedDataParallel` and `apex.amp` but uses neither (its wrap
is torch's `nn.parallel.DistributedDataParallel`). apex cannot be installed here (the
package index's `apex` is an unrelated project, and NVIDIA apex dropped `amp`): the
names exist, any use of them fails loudly."""

from . import amp, parallel  # noqa: F401
