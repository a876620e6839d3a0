# expect: status=rejected flags=tensor_subclass,no_custom_kernel
# problem: tests/problems/relu_add.py
# Returns a torch.Tensor subclass (the shape of a lazy tensor that could compute on access).
import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b).as_subclass(Lazy)
