import torch
import torch.nn as nn


class Model(nn.Module):
    """Max over the innermost (contiguous) dimension, values only."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dim)


batch_size = 192
dim1 = 4096
dim2 = 1024
reduce_dim = 2


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (batch_size * dim1 * dim2 + batch_size * dim1) * 4
    "bytes": 3_224_371_200,
    "small": {"batch_size": 4, "dim1": 48, "dim2": 64},
    "extra_shapes": [{"batch_size": 3, "dim1": 5, "dim2": 131}],
}
