import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-sample cross-entropy loss of logits against integer class targets
    (reduction='none', so each sample's loss is checked, not one near-constant mean)."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")


batch_size = 131072
num_classes = 4096


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 2.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = batch_size * num_classes * 4 + batch_size * 8 + batch_size * 4
    "bytes": 2_149_056_512,
    "small": {"batch_size": 32, "num_classes": 100},
    "extra_shapes": [{"batch_size": 7, "num_classes": 1000}],
}
