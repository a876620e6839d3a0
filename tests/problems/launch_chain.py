"""Test problem: eight rounds of x * 1.01 + 0.1 -> tanh on 4096 values, 24 tiny kernels. On a GPU the
host's launch rate sets the time, so anything that slows one side's launches (a profiler left
attached, a starved CPU) shows up in the speedup."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for _ in range(8):
            x = torch.tanh(x * 1.01 + 0.1)
        return x


N = 4096

HARNESS_META = {"level": 1, "small": {"N": 1024}}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
