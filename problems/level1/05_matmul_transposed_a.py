import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix product with the first operand stored transposed: C = A.T @ B,
    A is (K, M) and B is (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B)


M = 4096
K = 4096
N = 4096


def get_inputs():
    A = torch.randn(K, M)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=4096 dot products of randn: |C| ~ 64, fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 3.2e-4 (at rtol 1e-4) against float64 on an H100.
    "atol": 2e-3,
    # flops = 2 * M * K * N
    "flops": 137_438_953_472,
    # bytes = (K * M + K * N + M * N) * 4
    "bytes": 201_326_592,
    "small": {"M": 48, "K": 64, "N": 40},
    "extra_shapes": [{"M": 33, "N": 7}],
}
