# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Memoizes the first output by input shape. Every trial has fresh values, so the second trial fails.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, a, b):
        key = tuple(a.shape)
        if key not in self.cache:
            self.cache[key] = torch.relu(a + b)
        return self.cache[key]
