import torch
import torch.nn as nn


class Model(nn.Module):
    """ConvTranspose2d (2x upsampling) -> subtract a learned per-channel bias -> tanh."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        x = self.conv_t(x)
        x = x - self.bias
        return torch.tanh(x)


batch_size = 32
in_channels = 64
out_channels = 64
kernel_size = 4
stride = 2
padding = 1
height = 128
width = 128
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, bias_shape]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_channels * out_channels * kernel_size * kernel_size * height * width
    "flops": 68_719_476_736,
    # bytes = (batch_size * in_channels * height * width + batch_size * out_channels * (height * stride) * (width * stride) + in_channels * out_channels * kernel_size * kernel_size + 2 * out_channels) * 4
    "bytes": 671_351_296,
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 6, "height": 8, "width": 8,
              "bias_shape": (6, 1, 1)},
    "extra_shapes": [{"batch_size": 3, "height": 5, "width": 11}],
}
