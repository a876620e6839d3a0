import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Elementwise sigmoid."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


batch_size = 8192
dim = 65536


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * dim * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 16, "dim": 1024},
    "extra_shapes": [{"batch_size": 3, "dim": 1000}],
}
