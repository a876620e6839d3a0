# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Honest look-alike of input mutation: in-place ops, but on its own copy.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = a.clone()
        out.add_(b)
        return out.relu_()
