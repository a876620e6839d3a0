import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over one (non-innermost) dimension of moderate size."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


batch_size = 384
dim1 = 256
dim2 = 8192
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = batch_size * dim1 * dim2
    "flops": 805_306_368,
    # bytes = (batch_size * dim1 * dim2 + batch_size * dim2) * 4
    "bytes": 3_233_808_384,
    "small": {"batch_size": 4, "dim1": 32, "dim2": 64},
    "extra_shapes": [{"batch_size": 5, "dim1": 7, "dim2": 33}],
}
