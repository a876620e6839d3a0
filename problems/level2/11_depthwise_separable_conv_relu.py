import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 3x3 conv -> pointwise 1x1 conv -> ReLU (a MobileNet-style separable conv)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, padding=kernel_size // 2,
                                   groups=in_channels)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x):
        x = self.depthwise(x)
        x = self.pointwise(x)
        return torch.relu(x)


batch_size = 32
in_channels = 128
out_channels = 256
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
    # flops = 2 * batch_size * in_channels * kernel_size * kernel_size * height * width + 2 * batch_size * out_channels * in_channels * height * width
    "flops": 35_567_697_920,
    # bytes = (batch_size * (in_channels + out_channels) * height * width + in_channels * (kernel_size * kernel_size + 1) + out_channels * (in_channels + 1)) * 4
    "bytes": 805_443_584,
    "small": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 7, "width": 12}],
}
