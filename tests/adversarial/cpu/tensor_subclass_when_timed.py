# expect: status=rejected flags=tensor_subclass,no_custom_kernel
# problem: tests/problems/relu_add.py
# tensor_subclass_named.py's lazy output, returned only once every correctness trial is over (its
# first 10 calls are honest plain tensors): the timed calls' outputs are never judged whole, only
# fingerprinted, and the fingerprint's first torch call finished the work after the interval closed.
# The timing loop reads each timed output's type before anything touches it (timing/loop.py):
# rejected.
import torch
import torch.nn as nn


def _finish(t):
    job = t.__dict__.pop("_job", None)
    if job is None:
        return
    a, b, k = job
    with torch._C.DisableTorchFunctionSubclass():
        plain = t.as_subclass(torch.Tensor)
        torch.add(a[k:], b[k:], out=plain[k:])
        plain[k:].clamp_(min=0)


class Tensor(torch.Tensor):
    __module__ = "torch"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for x in list(args) + list(kwargs.values()):
            for y in (x if isinstance(x, (list, tuple)) else [x]):
                if type(y) is cls:
                    _finish(y)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
        if self.calls <= 10:
            return torch.relu(a + b)
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        k = a.numel() // 10
        torch.add(a[:k], b[:k], out=out[:k])
        out[:k].clamp_(min=0)
        lazy = torch.Tensor._make_subclass(Tensor, out, False)
        lazy.__dict__["_job"] = (a, b, k)
        return lazy
