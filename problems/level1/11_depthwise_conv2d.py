import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 2D convolution (groups == channels), 3x3 kernel, 'same' padding."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 32
channels = 64
kernel_size = 3
height = 512
width = 512


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * channels * kernel_size * kernel_size * height * width
    "flops": 9_663_676_416,
    # bytes = (2 * batch_size * channels * height * width + channels * (kernel_size * kernel_size + 1)) * 4
    "bytes": 4_294_969_856,
    "small": {"batch_size": 2, "channels": 8, "height": 32, "width": 32},
    "extra_shapes": [{"batch_size": 3, "height": 19, "width": 45}],
}
