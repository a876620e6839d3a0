import torch
import torch.nn as nn


class Model(nn.Module):
    """2D convolution, square 3x3 kernel, stride 1, 'same' padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 16
in_channels = 64
out_channels = 128
kernel_size = 3
padding = 1
height = 256
width = 256


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * kernel_size * height * width
    "flops": 154_618_822_656,
    # bytes = (batch_size * (in_channels + out_channels) * height * width + out_channels * in_channels * kernel_size * kernel_size + out_channels) * 4
    "bytes": 805_601_792,
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 17, "width": 23}],
}
