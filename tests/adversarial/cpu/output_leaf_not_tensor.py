# expect: status=rejected flags=malformed_report,no_custom_kernel
# problem: tests/problems/relu_add.py
# Its child sends a string where its description (and the reference) has a tensor. The parent
# handed the string to the tensor comparison: an AttributeError there ended `harness eval` without
# a record, and in a batch the solution was skipped as an internal error, escaping its verdict.
import importlib

import torch
import torch.nn as nn

_runner = importlib.import_module("harness." + "process.runner")
exec("_runner._plain = lambda torch, obj, _real=_runner._plain: 'x' if isinstance(obj, torch.Tensor) else _real(torch, obj)")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
