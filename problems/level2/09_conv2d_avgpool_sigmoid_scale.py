import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d -> AvgPool2d(2) -> sigmoid -> multiply by a learned per-channel scale."""

    def __init__(self, in_channels, out_channels, kernel_size, pool_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool = nn.AvgPool2d(pool_size)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        x = self.conv(x)
        x = self.pool(x)
        x = torch.sigmoid(x)
        return x * self.scale


batch_size = 32
in_channels = 32
out_channels = 64
kernel_size = 3
pool_size = 2
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_size]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * kernel_size * height * width
    "flops": 77_309_411_328,
    # bytes = (batch_size * in_channels * height * width + batch_size * out_channels * (height // pool_size) * (width // pool_size) + out_channels * in_channels * kernel_size * kernel_size + 2 * out_channels) * 4
    "bytes": 402_727_424,
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 10, "width": 14}],
}
