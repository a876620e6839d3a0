# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Returns a view with an extra dimension: the shape is part of the answer too.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b).unsqueeze(0)
