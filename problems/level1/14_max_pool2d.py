import torch
import torch.nn as nn


class Model(nn.Module):
    """2D max pooling, 3x3 window, stride 2, padding 1 (ResNet stem pooling)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 32
channels = 64
height = 512
width = 512
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (batch_size * channels * height * width + batch_size * channels * ((height + 1) // 2) * ((width + 1) // 2)) * 4
    "bytes": 2_684_354_560,
    "small": {"batch_size": 2, "channels": 4, "height": 32, "width": 32},
    "extra_shapes": [{"batch_size": 3, "height": 17, "width": 30}],
}
