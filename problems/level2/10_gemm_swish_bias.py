import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> Swish (x * sigmoid(x)) -> add a learned bias vector."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        x = self.linear(x)
        x = x * torch.sigmoid(x)
        return x + self.bias


batch_size = 4096
in_features = 8192
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + 2 * out_features + batch_size * out_features) * 4
    "bytes": 234_897_408,
    "small": {"batch_size": 16, "in_features": 96, "out_features": 32},
    "extra_shapes": [{"batch_size": 3}],
}
