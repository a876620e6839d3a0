"""A healthy problem whose HARNESS_META has a misspelt key and a value of the wrong kind: without the
check, the extra shape would never be tried, and "no" would be read as true (training mode)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 0.5 * x


N = 4096

HARNESS_META = {"extra_shape": [{"N": 1000}], "train": "no", "expect_flags": ["bad_meta"]}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
