import torch
import torch.nn as nn


class Model(nn.Module):
    """Gemm -> per-feature Scale -> BatchNorm1d (training mode: batch statistics)."""

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale
        x = self.bn(x)
        return x


batch_size = 1024
in_features = 8192
out_features = 8192
scale_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_shape]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + batch_size * out_features + 4 * out_features) * 4
    "bytes": 335_675_392,
    "small": {"batch_size": 16, "in_features": 64, "out_features": 32, "scale_shape": (32,)},
    "extra_shapes": [{"batch_size": 7}],
}
