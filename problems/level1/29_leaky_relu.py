import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Elementwise LeakyReLU with a configurable negative slope."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 8192
dim = 65536
negative_slope = 0.2


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [negative_slope]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 2 * batch_size * dim
    "flops": 1_073_741_824,
    # bytes = 2 * batch_size * dim * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 16, "dim": 1024},
    "extra_shapes": [{"batch_size": 3, "dim": 1000}],
}
