import torch
import torch.nn as nn


class Model(nn.Module):
    """Square matrix product C = A @ B, both operands N x N."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 4096


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=4096 dot products of randn: |C| ~ 64 and fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 4.4e-4 (at rtol 1e-4) against float64 on an H100.
    "atol": 2e-3,
    # flops = 2 * N * N * N
    "flops": 137_438_953_472,
    # bytes = 3 * N * N * 4
    "bytes": 201_326_592,
    "small": {"N": 64},
    "extra_shapes": [{"N": 33}, {"N": 130}],
}
