import torch
import torch.nn as nn


def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class Model(nn.Module):
    """Two-level U-Net (training-mode BN): double conv (conv-BN-ReLU x2), maxpool, double conv at
    half resolution, transposed-conv upsampling, concatenation with the skip connection, double conv,
    1x1 conv to the output classes."""

    def __init__(self, in_channels, base_channels, out_channels):
        super().__init__()
        c = base_channels
        self.enc1 = double_conv(in_channels, c)
        self.pool = nn.MaxPool2d(2)
        self.enc2 = double_conv(c, 2 * c)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec1 = double_conv(2 * c, c)
        self.out = nn.Conv2d(c, out_channels, 1)

    def forward(self, x):
        s1 = self.enc1(x)
        x = self.enc2(self.pool(s1))
        x = self.up(x)
        x = self.dec1(torch.cat([x, s1], dim=1))
        return self.out(x)


batch_size = 4
in_channels = 3
base_channels = 64
out_channels = 2
height = 256
width = 256


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, base_channels, out_channels]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    "small": {"batch_size": 2, "base_channels": 8, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 1, "height": 20, "width": 28}],
}
