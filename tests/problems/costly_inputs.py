"""Test problem: relu(a @ b), whose inputs take some thirty times longer to make than the forward
takes, as full-size inputs do on a CPU (torch.randn of gigabytes against an elementwise forward).
The harness's own per-call overhead then dwarfs the forward: what a candidate hides in its input
making must still show (tests/adversarial/cpu/precompute_in_inputs.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)


N = 512
DRAWS = 64  # each input the sum of this many normal draws, scaled back to unit variance

HARNESS_META = {"level": 1}


def _costly_normal():
    return sum(torch.randn(N, N) for _ in range(DRAWS)) / DRAWS ** 0.5


def get_inputs():
    return [_costly_normal(), _costly_normal()]


def get_init_inputs():
    return []
