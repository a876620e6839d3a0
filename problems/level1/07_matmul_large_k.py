import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix product with a long reduction dimension: C (M x N) = A (M x K) @ B (K x N),
    K >> M, N (a shape where split-K pays off)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 1024
K = 65536
N = 1024


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=65536 dot products of randn: |C| ~ 256; fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 3.1e-3 (at rtol 1e-4) against float64 on an H100.
    "atol": 2e-2,
    # flops = 2 * M * K * N
    "flops": 137_438_953_472,
    # bytes = (M * K + K * N + M * N) * 4
    "bytes": 541_065_216,
    "small": {"M": 16, "K": 2048, "N": 24},
    "extra_shapes": [{"M": 9, "N": 33}],
}
