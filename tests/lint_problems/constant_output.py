"""Degenerate: the output is the same number everywhere (a sigmoid saturated by a huge bias)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 1e-3 + 50.0) * torch.ones_like(x)


N = 4096
HARNESS_META = {"expect_flags": ["constant_output", "input_independent"]}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
