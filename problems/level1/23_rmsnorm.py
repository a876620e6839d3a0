import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch_size = 32
seq_len = 2048
hidden = 4096


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (2 * batch_size * seq_len * hidden + hidden) * 4
    "bytes": 2_147_500_032,
    "small": {"batch_size": 2, "seq_len": 16, "hidden": 64},
    "extra_shapes": [{"batch_size": 3, "seq_len": 7}],
}
