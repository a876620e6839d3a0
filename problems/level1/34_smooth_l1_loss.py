import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-sample Huber / smooth-L1 loss with threshold beta, averaged over the feature dimension."""

    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(predictions, targets, reduction="none", beta=self.beta).mean(dim=1)


batch_size = 65536
dim = 4096
beta = 0.5


def get_inputs():
    predictions = torch.randn(batch_size, dim) * (torch.rand(batch_size, 1) * 3.0)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return [beta]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (2 * batch_size * dim + batch_size) * 4
    "bytes": 2_147_745_792,
    "small": {"batch_size": 32, "dim": 128},
    "extra_shapes": [{"batch_size": 5, "dim": 77}],
}
