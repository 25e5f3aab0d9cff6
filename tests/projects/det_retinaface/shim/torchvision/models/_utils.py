"""torchvision.models._utils.IntermediateLayerGetter: a ModuleDict of the model's
children up to the last one named in `return_layers`, whose forward runs them in order
and returns an OrderedDict {new_name: output} of the named ones (torchvision's
behaviour; written here, the real torchvision is not installed)."""

from collections import OrderedDict

from torch import nn


class IntermediateLayerGetter(nn.ModuleDict):
    def __init__(self, model: nn.Module, return_layers: dict) -> None:
        if not set(return_layers).issubset(name for name, _ in model.named_children()):
            raise ValueError("return_layers are not present in model")
        wanted = {str(k): str(v) for k, v in return_layers.items()}
        remaining = dict(wanted)
        layers = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            remaining.pop(name, None)
            if not remaining:
                break
        super().__init__(layers)
        self.return_layers = wanted

    def forward(self, x):
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out
