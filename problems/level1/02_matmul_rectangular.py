import torch
import torch.nn as nn


class Model(nn.Module):
    """Rectangular matrix product C (M x N) = A (M x K) @ B (K x N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 2048
K = 8192
N = 4096


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=8192 dot products of randn: |C| ~ 90, fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 7.0e-4 (at rtol 1e-4) against float64 on an H100.
    "atol": 3e-3,
    # flops = 2 * M * K * N
    "flops": 137_438_953_472,
    # bytes = (M * K + K * N + M * N) * 4
    "bytes": 234_881_024,
    "small": {"M": 48, "K": 96, "N": 80},
    "extra_shapes": [{"M": 17, "N": 129}],
}
