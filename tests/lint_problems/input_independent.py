"""Degenerate: the output depends on the weights only."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return self.w * 2 + 0 * x


N = 1024
HARNESS_META = {"expect_flags": ["input_independent"]}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return [N]
