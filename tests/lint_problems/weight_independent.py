"""Degenerate: a layer whose weights are normalized away (softmax over a dim of size 1 after Linear)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, 1)

    def forward(self, x):
        return torch.softmax(self.linear(x), dim=1) * x


N = 64
HARNESS_META = {"expect_flags": ["weight_independent"]}


def get_inputs():
    return [torch.randn(16, N)]


def get_init_inputs():
    return [N]
