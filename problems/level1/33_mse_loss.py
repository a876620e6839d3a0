import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-sample mean squared error: mean over the feature dimension of (pred - target)^2."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2, dim=1)


batch_size = 65536
dim = 4096


def get_inputs():
    # Each row has its own scale, so the per-sample losses spread over a wide range.
    predictions = torch.randn(batch_size, dim) * (torch.rand(batch_size, 1) * 3.0)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # flops = 3 * batch_size * dim
    "flops": 805_306_368,
    # bytes = (2 * batch_size * dim + batch_size) * 4
    "bytes": 2_147_745_792,
    "small": {"batch_size": 32, "dim": 128},
    "extra_shapes": [{"batch_size": 5, "dim": 77}],
}
