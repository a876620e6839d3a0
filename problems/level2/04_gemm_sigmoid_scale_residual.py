import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> y = sigmoid(x) * scale + x (scaled sigmoid gate added back to the pre-activation)."""

    def __init__(self, in_features, out_features, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.linear(x)
        return torch.sigmoid(x) * self.scale_factor + x


batch_size = 4096
in_features = 4096
out_features = 4096
scale_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_factor]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + out_features + batch_size * out_features) * 4
    "bytes": 201_342_976,
    "small": {"batch_size": 16, "in_features": 64, "out_features": 32},
    "extra_shapes": [{"batch_size": 3}],
}
