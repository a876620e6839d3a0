"""Test problem: softmax over 16384 columns. Every output is ~6e-5, inside any absolute tolerance of
zero, so a kernel that writes zeros must still fail (the tolerance is judged against the output's scale)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 64
dim = 16384

HARNESS_META = {"level": 1, "small": {"batch_size": 8}}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
