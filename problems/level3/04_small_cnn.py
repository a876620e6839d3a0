import torch
import torch.nn as nn


class Model(nn.Module):
    """Small VGG-style image classifier: three conv3x3-BN-ReLU-maxpool stages (training-mode BN),
    global average pool, two-layer classifier head."""

    def __init__(self, in_channels, widths, num_classes):
        super().__init__()
        layers = []
        prev = in_channels
        for w in widths:
            layers += [
                nn.Conv2d(prev, w, 3, padding=1, bias=False),
                nn.BatchNorm2d(w),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
            prev = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Linear(prev, 2 * prev), nn.ReLU(), nn.Linear(2 * prev, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = self.pool(x).flatten(1)
        return self.head(x)


batch_size = 64
in_channels = 3
image_size = 224
widths = [32, 64, 128]
num_classes = 100


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, widths, num_classes]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    "small": {"batch_size": 2, "image_size": 32, "widths": [8, 16, 16], "num_classes": 10},
    "extra_shapes": [{"batch_size": 3, "image_size": 40}],
}
