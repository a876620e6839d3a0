import torch
import torch.nn as nn


class Model(nn.Module):
    """Argmax over a strided (middle) dimension; returns int64 indices."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


batch_size = 192
dim1 = 1024
dim2 = 4096
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = batch_size * dim1 * dim2 * 4 + batch_size * dim2 * 8
    "bytes": 3_227_516_928,
    "small": {"batch_size": 4, "dim1": 64, "dim2": 48},
    "extra_shapes": [{"batch_size": 3, "dim1": 33, "dim2": 7}],
}
