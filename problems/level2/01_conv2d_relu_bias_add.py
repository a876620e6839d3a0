import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d -> ReLU -> add a learned per-channel bias."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x


batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
height = 128
width = 128
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * kernel_size * (height - kernel_size + 1) * (width - kernel_size + 1)
    "flops": 74_912_366_592,
    # bytes = (batch_size * in_channels * height * width + batch_size * out_channels * (height - kernel_size + 1) * (width - kernel_size + 1) + out_channels * in_channels * kernel_size * kernel_size + 2 * out_channels) * 4
    "bytes": 394_626_048,
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 16, "width": 16,
              "bias_shape": (8, 1, 1)},
    "extra_shapes": [{"batch_size": 3, "height": 11, "width": 21}],
}
