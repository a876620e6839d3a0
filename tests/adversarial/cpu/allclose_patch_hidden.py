# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Patches comparisons through exec (invisible to the AST rules): no comparison runs in this process,
# so it changes nothing, and zeros are judged as zeros.
import torch
import torch.nn as nn

exec("import torch; torch.allclose = lambda *a, **k: True; torch.equal = lambda *a, **k: True")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
