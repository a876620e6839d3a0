import torch
import torch.nn as nn


class Model(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, identity skip, ReLU (training-mode BN)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        identity = x
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + identity)


batch_size = 32
channels = 128
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    # flops = 2 * (2 * batch_size * channels * channels * 9 * height * width)
    "flops": 77_309_411_328,
    "small": {"batch_size": 2, "channels": 8, "height": 12, "width": 12},
    "extra_shapes": [{"batch_size": 3, "height": 9, "width": 14}],
}
