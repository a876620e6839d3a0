import torch
import torch.nn as nn


class Model(nn.Module):
    """2D average pooling, 3x3 window, stride 1, padding 1 (count_include_pad=False)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 32
channels = 64
height = 512
width = 512
kernel_size = 3
stride = 1
padding = 1


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * channels * height * width * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 2, "channels": 4, "height": 32, "width": 32},
    "extra_shapes": [{"batch_size": 3, "height": 13, "width": 29}],
}
