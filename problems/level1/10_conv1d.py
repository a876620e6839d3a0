import torch
import torch.nn as nn


class Model(nn.Module):
    """1D convolution over a long sequence, kernel 7, 'same' padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 32
in_channels = 128
out_channels = 256
kernel_size = 7
length = 8192


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * out_channels * in_channels * kernel_size * length
    "flops": 120_259_084_288,
    # bytes = (batch_size * (in_channels + out_channels) * length + out_channels * in_channels * kernel_size + out_channels) * 4
    "bytes": 403_571_712,
    "small": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "length": 64},
    "extra_shapes": [{"batch_size": 3, "length": 37}],
}
