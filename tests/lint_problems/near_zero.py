"""Degenerate: every output is far below atol (a mean of many centred values), so zeros would pass
an absolute tolerance."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.mean(dim=1) * 1e-3


HARNESS_META = {"expect_flags": ["near_zero"]}


def get_inputs():
    return [torch.randn(64, 65536)]


def get_init_inputs():
    return []
