import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive prefix sum along dimension 1."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 65536
length = 4096


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [1]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: prefix sums of up to 4096 randn reach |out| ~ 250; scan order changes fp32 rounding.
    # The PyTorch fp32 reference itself needed atol 1.2e-4 (at rtol 1e-4) against float64 on an H100.
    "atol": 1e-3,
    # flops = batch_size * length
    "flops": 268_435_456,
    # bytes = 2 * batch_size * length * 4
    "bytes": 2_147_483_648,
    "small": {"batch_size": 16, "length": 256},
    "extra_shapes": [{"batch_size": 3, "length": 1001}],
}
