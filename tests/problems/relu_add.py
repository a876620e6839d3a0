"""Test problem: relu(a + b), elementwise. Tiny on CPU, memory-bound on a GPU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


N = 1 << 24

HARNESS_META = {"level": 1, "small": {"N": 4096}, "extra_shapes": [{"N": 1000}]}


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
