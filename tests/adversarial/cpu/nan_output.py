# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# NaN is never close to anything (NaN must appear exactly where the reference has NaN).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.full_like(a, float("nan"))
