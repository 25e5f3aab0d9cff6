"""timm.models.layers.LayerNorm2d: names only (DyT is not the network the test trains)."""

import torch.nn as nn


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, as timm's."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
