import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one (non-innermost) dimension, keepdim=True."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 192
dim1 = 4096
dim2 = 1024
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: sums of 4096 randn: |out| ~ 64, fp32 rounding differs by reduction order.
    # The PyTorch fp32 reference itself needed atol 2.1e-5 (at rtol 1e-4) against float64 on an H100.
    "atol": 5e-4,
    # flops = batch_size * dim1 * dim2
    "flops": 805_306_368,
    # bytes = (batch_size * dim1 * dim2 + batch_size * dim2) * 4
    "bytes": 3_222_011_904,
    "small": {"batch_size": 4, "dim1": 64, "dim2": 48},
    "extra_shapes": [{"batch_size": 3, "dim1": 129, "dim2": 5}],
}
