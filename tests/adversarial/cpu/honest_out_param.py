# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Honest look-alike of the caching cheats: reuses a scratch buffer between calls but recomputes every
# time, and returns a fresh tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scratch = None

    def forward(self, a, b):
        if self.scratch is None or self.scratch.shape != a.shape:
            self.scratch = torch.empty_like(a)
        torch.add(a, b, out=self.scratch)
        return torch.relu(self.scratch)
