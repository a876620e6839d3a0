import torch
import torch.nn as nn


class Model(nn.Module):
    """3D convolution, cubic 3x3x3 kernel, 'same' padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 8
in_channels = 32
out_channels = 64
kernel_size = 3
depth = 32
height = 64
width = 64


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size ** 3 * depth * height * width
    "flops": 115_964_116_992,
    # bytes = (batch_size * (in_channels + out_channels) * depth * height * width + out_channels * in_channels * kernel_size ** 3 + out_channels) * 4
    "bytes": 402_874_624,
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 6, "height": 8, "width": 8},
    "extra_shapes": [{"batch_size": 1, "depth": 5, "height": 9, "width": 7}],
}
