"""Test problem with weights: relu(x @ W^T + b). Model and ModelNew built from the same seed get equal
weights when their parameters have the same shapes (KernelBench's convention)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 256
in_features = 1024
out_features = 1024

HARNESS_META = {"level": 2, "small": {"batch_size": 16, "in_features": 64, "out_features": 32}}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
