# expect: status=rejected flags=tensor_subclass,no_custom_kernel
# problem: tests/problems/relu_add.py
# A helper's attack: a lazy torch.Tensor subclass that names itself torch.Tensor (its __module__ set to
# "torch"), so a type read by name reads as the real one. Its forward computes a tenth of the answer;
# the rest is done by __torch_function__ on the first torch call that touches the output, which was
# the harness's own fingerprint, after the timed interval closed: passed at 17.6x on relu_add at full
# size. This one returns it in its correctness trials only (its first 5 calls) and plain tensors
# when timed, so that only the trials' type check stands in its way (tensor_subclass_when_timed.py
# pins the timed calls' check): the type is judged by identity (runner._out_meta), rejected.
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
        if self.calls > 5:
            return torch.relu(a + b)
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        k = a.numel() // 10
        torch.add(a[:k], b[:k], out=out[:k])
        out[:k].clamp_(min=0)
        lazy = torch.Tensor._make_subclass(Tensor, out, False)
        lazy.__dict__["_job"] = (a, b, k)
        return lazy
