import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Elementwise Softplus with beta and threshold: log(1 + exp(beta * x)) / beta,
    linear above the threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


batch_size = 8192
dim = 65536
beta = 2.0
threshold = 10.0


def get_inputs():
    x = torch.randn(batch_size, dim) * 4.0
    return [x]


def get_init_inputs():
    return [beta, threshold]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * dim * 4
    "bytes": 4_294_967_296,
    "small": {"batch_size": 16, "dim": 1024},
    "extra_shapes": [{"batch_size": 3, "dim": 1000}],
}
