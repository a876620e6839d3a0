# expect: status=incorrect flags=input_mutated,no_custom_kernel
# problem: tests/problems/relu_add.py
# Writes the result into its first input and returns it (saves an allocation, changes the caller's data).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a.add_(b).relu_()
