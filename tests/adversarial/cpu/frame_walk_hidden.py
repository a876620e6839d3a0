# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Walks up the call stack (through a name the AST rules do not see) for any tensor of the output's
# shape. The reference never ran in this process, so there is nothing to find but the inputs.
import torch
import torch.nn as nn

_getframe = getattr(__import__("s" + "ys"), "_get" + "frame")


class ModelNew(nn.Module):
    def forward(self, a, b):
        f = _getframe(1)
        while f is not None:
            for v in f.f_locals.values():
                if isinstance(v, torch.Tensor) and v.shape == a.shape and v is not a and v is not b:
                    return v
            f = f.f_back
        return a
