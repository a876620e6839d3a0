import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-sample KL divergence KL(p || q) between two categorical distributions given as logits:
    p = softmax(target_logits), log q = log_softmax(pred_logits), summed over classes."""

    def __init__(self):
        super().__init__()

    def forward(self, pred_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
        log_q = F.log_softmax(pred_logits, dim=1)
        p = F.softmax(target_logits, dim=1)
        return F.kl_div(log_q, p, reduction="none").sum(dim=1)


batch_size = 65536
num_classes = 4096


def get_inputs():
    # Per-row temperatures make the divergences differ from sample to sample.
    pred_logits = torch.randn(batch_size, num_classes) * (torch.rand(batch_size, 1) * 2.0)
    target_logits = torch.randn(batch_size, num_classes) * (torch.rand(batch_size, 1) * 2.0)
    return [pred_logits, target_logits]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (2 * batch_size * num_classes + batch_size) * 4
    "bytes": 2_147_745_792,
    "small": {"batch_size": 32, "num_classes": 100},
    "extra_shapes": [{"batch_size": 5, "num_classes": 33}],
}
