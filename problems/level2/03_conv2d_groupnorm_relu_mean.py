import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d -> GroupNorm -> ReLU -> mean over the spatial dimensions (output: batch x channels)."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.gn = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.gn(x)
        x = torch.relu(x)
        return x.mean(dim=(2, 3))


batch_size = 32
in_channels = 32
out_channels = 128
kernel_size = 3
num_groups = 16
height = 128
width = 128


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * kernel_size * height * width
    "flops": 38_654_705_664,
    # bytes = (batch_size * in_channels * height * width + out_channels * in_channels * kernel_size * kernel_size + 3 * out_channels + batch_size * out_channels) * 4
    "bytes": 67_274_240,
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "num_groups": 4,
              "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 3, "height": 9, "width": 14}],
}
