import torch
import torch.nn as nn


class Model(nn.Module):
    """BatchNorm2d in training mode (batch statistics over N, H, W)."""

    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        # Random affine parameters: with the default ones (weight 1, bias 0) a kernel that
        # ignores them would pass. Drawn after construction, from the same seeded stream.
        with torch.no_grad():
            self.bn.weight.normal_(1.0, 0.2)
            self.bn.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


batch_size = 64
num_features = 64
height = 256
width = 256


def get_inputs():
    x = torch.randn(batch_size, num_features, height, width) * 3.0 + 1.0
    return [x]


def get_init_inputs():
    return [num_features]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = 2 * batch_size * num_features * height * width * 4
    "bytes": 2_147_483_648,
    "small": {"batch_size": 4, "num_features": 8, "height": 16, "width": 16},
    "extra_shapes": [{"batch_size": 2, "height": 9, "width": 13}],
}
