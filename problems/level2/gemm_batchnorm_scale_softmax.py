import torch
import torch.nn as nn


class Model(nn.Module):
    """Gemm -> BatchNorm1d (training mode) -> Scale (learned scalar) -> Softmax over features."""

    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,)):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.gemm(x)
        x = self.bn(x)
        x = self.scale * x
        x = self.softmax(x)
        return x


batch_size = 1024
in_features = 8192
out_features = 8192
bn_eps = 1e-5
bn_momentum = 0.1
scale_shape = (1,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bn_eps, bn_momentum, scale_shape]


HARNESS_META = {
    "level": 2,
    "dtype": "fp32",
    # flops = 2 * batch_size * in_features * out_features
    "flops": 137_438_953_472,
    # bytes = (batch_size * in_features + in_features * out_features + batch_size * out_features + 3 * out_features + 1) * 4
    "bytes": 335_642_628,
    "small": {"batch_size": 16, "in_features": 64, "out_features": 32},
    "extra_shapes": [{"batch_size": 7}],
}
