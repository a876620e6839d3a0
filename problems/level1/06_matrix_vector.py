import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product y = A @ x with A (M, K) and x (K, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


M = 32768
K = 32768


def get_inputs():
    A = torch.randn(M, K)
    x = torch.randn(K, 1)
    return [A, x]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=32768 dot products of randn: |y| ~ 180, fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 5.4e-5 (at rtol 1e-4) against float64 on an H100.
    "atol": 5e-4,
    # flops = 2 * M * K
    "flops": 2_147_483_648,
    # bytes = (M * K + K + M) * 4
    "bytes": 4_295_229_440,
    "small": {"M": 256, "K": 512},
    "extra_shapes": [{"M": 77}],
}
