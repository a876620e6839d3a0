import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of a (batch, dim) tensor of logits."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 131072
dim = 4096


def get_inputs():
    # Logits with std 3, so that the largest probabilities in a row are well above zero.
    x = torch.randn(batch_size, dim) * 3.0
    return [x]


def get_init_inputs():
    return []


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * dim * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 16, "dim": 256},
    "extra_shapes": [{"batch_size": 3, "dim": 1000}],
}
