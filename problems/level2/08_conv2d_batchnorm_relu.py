import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d (training mode) -> ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
height = 128
width = 128


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * kernel_size * height * width
    "flops": 77_309_411_328,
    # bytes = (batch_size * (in_channels + out_channels) * height * width + out_channels * in_channels * kernel_size * kernel_size + 2 * out_channels) * 4
    "bytes": 402_949_120,
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 13, "width": 10}],
}
