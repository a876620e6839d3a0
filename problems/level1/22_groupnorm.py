import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm with affine parameters."""

    def __init__(self, num_groups: int, num_channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_channels)
        # Random affine parameters: with the default ones (weight 1, bias 0) a kernel that
        # ignores them would pass. Drawn after construction, from the same seeded stream.
        with torch.no_grad():
            self.gn.weight.normal_(1.0, 0.2)
            self.gn.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 32
num_channels = 128
num_groups = 16
height = 256
width = 256


def get_inputs():
    x = torch.randn(batch_size, num_channels, height, width) * 2.0 - 0.5
    return [x]


def get_init_inputs():
    return [num_groups, num_channels]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * num_channels * height * width * 4
    "bytes": 2_147_483_648,
    "small": {"batch_size": 2, "num_channels": 8, "num_groups": 4, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 11, "width": 7}],
}
