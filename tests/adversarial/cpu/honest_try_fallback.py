# expect: status=passed flags=try_except_fallback,no_custom_kernel
# problem: tests/problems/relu_add.py
# Honest look-alike: a try/except that falls back to PyTorch. It passes, and says so in its flags.
import torch
import torch.nn as nn

try:
    from torch.utils.cpp_extension import load_inline
    ext = None
except Exception:
    ext = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            return ext.relu_add(a, b)
        except AttributeError:
            return torch.relu(a + b)
