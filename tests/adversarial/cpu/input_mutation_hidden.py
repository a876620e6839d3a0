# expect: status=incorrect flags=input_mutated,no_custom_kernel
# problem: tests/problems/relu_add.py
# Scribbles on its inputs and, behind exec (hidden from the static checks), makes torch.equal always
# agree and Tensor.clone return the tensor itself: a check in its own process comparing the inputs
# with a copy taken before the call would see nothing. The harness took both functions before the
# solution's import, and ships inputs that differ to the parent.
import torch
import torch.nn as nn

exec("torch.equal = lambda a, b: True\n"
     "torch.clone = lambda t, *a, **k: t\n"
     "torch.Tensor.clone = lambda self, *a, **k: self")


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.relu(a + b)
        a.zero_()
        return out
