import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix product: C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 128
m = 512
k = 1024
n = 512


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # atol: K=1024 dot products of randn: |C| ~ 32, fp32 rounding differs by accumulation order.
    # The PyTorch fp32 reference itself needed atol 8.9e-5 (at rtol 1e-4) against float64 on an H100.
    "atol": 5e-4,
    # flops = 2 * batch_size * m * k * n
    "flops": 68_719_476_736,
    # bytes = batch_size * (m * k + k * n + m * n) * 4
    "bytes": 671_088_640,
    "small": {"batch_size": 4, "m": 32, "k": 48, "n": 40},
    "extra_shapes": [{"batch_size": 3, "m": 19, "n": 21}],
}
