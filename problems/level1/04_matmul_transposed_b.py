import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix product with the second operand stored transposed: C = A @ B.T,
    A is (M, K) and B is (N, K) (the layout of an nn.Linear weight)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.T)


M = 4096
K = 2048
N = 8192


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(N, K)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=2048 dot products of randn: |C| ~ 45, fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 1.7e-4 (at rtol 1e-4) against float64 on an H100.
    "atol": 1e-3,
    # flops = 2 * M * K * N
    "flops": 137_438_953_472,
    # bytes = (M * K + N * K + M * N) * 4
    "bytes": 234_881_024,
    "small": {"M": 64, "K": 32, "N": 96},
    "extra_shapes": [{"M": 31, "N": 65}],
}
