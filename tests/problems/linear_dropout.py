"""Test problem whose forward draws random numbers: dropout in training mode, as KernelBench's
level2/66_Matmul_Dropout_Softmax leaves it. Both sides' forwards start from the same generator
state each trial (process/runner.py), so an identity passes and any other draw does not."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        return torch.softmax(self.dropout(self.linear(x)), dim=1)


batch_size = 128
in_features = 1024
out_features = 1024
dropout_p = 0.2

HARNESS_META = {"level": 2, "small": {"batch_size": 16, "in_features": 64, "out_features": 64}}


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
