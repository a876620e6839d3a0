import torch
import torch.nn as nn


class Model(nn.Module):
    """LogSoftmax over dimension 1 of a (batch, dim) tensor."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


batch_size = 131072
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return [1]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * dim * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 16, "dim": 256},
    "extra_shapes": [{"batch_size": 5, "dim": 999}],
}
