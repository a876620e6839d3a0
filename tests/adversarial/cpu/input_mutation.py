# expect: status=incorrect flags=input_mutated,no_custom_kernel
# problem: tests/problems/relu_add.py
# Right output, but scribbles on its inputs (a later op reading them would be wrong).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.relu(a + b)
        a.zero_()
        return out
