import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> GroupNorm over groups of output features -> Hardtanh clamp."""

    def __init__(self, in_features, out_features, num_groups, min_val, max_val):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.gn = nn.GroupNorm(num_groups, out_features)
        self.hardtanh = nn.Hardtanh(min_val=min_val, max_val=max_val)

    def forward(self, x):
        x = self.linear(x)
        x = self.gn(x)
        return self.hardtanh(x)


batch_size = 2048
in_features = 4096
out_features = 8192
num_groups = 32
min_val = -1.5
max_val = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups, min_val, max_val]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + 3 * out_features + batch_size * out_features) * 4
    "bytes": 234_979_328,
    "small": {"batch_size": 16, "in_features": 64, "out_features": 64, "num_groups": 8},
    "extra_shapes": [{"batch_size": 3}],
}
