"""Deliberately broken CPU solution (expected verdict: incorrect): the kernel allocates its output and
returns it without writing it, the classic "inherit someone else's answer" attempt."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) { return torch::empty_like(a); }
"""

ext = load_inline(name="relu_add_unwritten", cpp_sources=cpp_source, functions=["relu_add"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.relu_add(a, b)
