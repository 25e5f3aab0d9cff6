"""timm.models.layers.trunc_normal_: timm 0.4.12's is torch.nn.init.trunc_normal_'s
algorithm (a truncated normal drawn from the global generator)."""

import torch


def trunc_normal_(tensor, mean=0., std=1., a=-2., b=2.):
    return torch.nn.init.trunc_normal_(tensor, mean=mean, std=std, a=a, b=b)
