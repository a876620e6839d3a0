import torch
import torch.nn as nn


class Model(nn.Module):
    """Transposed 2D convolution that doubles the spatial size (kernel 4, stride 2, padding 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_t(x)


batch_size = 16
in_channels = 128
out_channels = 64
kernel_size = 4
stride = 2
padding = 1
height = 128
width = 128


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_channels * out_channels * kernel_size * kernel_size * height * width
    "flops": 68_719_476_736,
    # bytes = (batch_size * in_channels * height * width + batch_size * out_channels * (height * stride) * (width * stride) + in_channels * out_channels * kernel_size * kernel_size + out_channels) * 4
    "bytes": 403_177_728,
    "small": {"batch_size": 2, "in_channels": 8, "out_channels": 4, "height": 12, "width": 12},
    "extra_shapes": [{"batch_size": 3, "height": 7, "width": 13}],
}
