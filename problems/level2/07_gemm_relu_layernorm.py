import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> ReLU -> LayerNorm over the output features."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.ln = nn.LayerNorm(out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        return self.ln(x)


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + 3 * out_features + batch_size * out_features) * 4
    "bytes": 201_375_744,
    "small": {"batch_size": 16, "in_features": 64, "out_features": 48},
    "extra_shapes": [{"batch_size": 5}],
}
