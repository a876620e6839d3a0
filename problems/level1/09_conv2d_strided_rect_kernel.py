import torch
import torch.nn as nn


class Model(nn.Module):
    """2D convolution with a rectangular kernel, stride 2 and asymmetric padding, no bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: int, padding: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                              bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 16
in_channels = 32
out_channels = 64
kernel_size = (3, 5)
stride = 2
padding = (1, 2)
height = 512
width = 512


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size[0] * kernel_size[1] * (height // stride) * (width // stride)
    "flops": 64_424_509_440,
    # bytes = (batch_size * in_channels * height * width + batch_size * out_channels * (height // stride) * (width // stride) + out_channels * in_channels * kernel_size[0] * kernel_size[1]) * 4
    "bytes": 805_429_248,
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 20, "width": 24},
    "extra_shapes": [{"batch_size": 3, "height": 15, "width": 19}],
}
