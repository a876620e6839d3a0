# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/launch_chain.py
# The harness's own loop seeds each call's forward (runner.seed_forward) before the call's clocked
# interval opens (timing/clocked.py). This wraps it: from the seed it rebuilds the call's inputs
# (runner.make_inputs) and runs the forward there, outside the interval; the timed forward returns
# that output where its inputs are the ones rebuilt, and computes otherwise. When the seed told was
# the inputs' own, it passed at 7.6x (a helper's attack; 18-24x with the clock's loop rewritten).
# The seeds a side is told are now drawn apart from the inputs' (measure._told_seeds): its guess is
# never right, and it passes at its speed. tests/test_clocked.py runs it both ways.
import importlib
import torch
import torch.nn as nn

_CACHE = {}


def _chain(x):
    for _ in range(8):
        x = torch.tanh(x * 1.01 + 0.1)
    return x


exec('''
_R = importlib.import_module("harness." + "process.runner").Runner
_orig_seed = _R.seed_forward
def _seed_forward(self, seed):
    try:
        if getattr(self, "role", None) != "reference":
            with torch.no_grad():
                ins = self.make_inputs(seed)
                _CACHE.clear()
                _CACHE["x"] = ins[0]
                _CACHE["y"] = _chain(ins[0]).contiguous()
    except Exception:
        _CACHE.clear()
    return _orig_seed(self, seed)
_R.seed_forward = _seed_forward
''')


class ModelNew(nn.Module):
    def forward(self, x):
        c = _CACHE.get("x")
        if c is not None and c.shape == x.shape and float(c[0]) == float(x[0]) and float(c[-1]) == float(x[-1]):
            return _CACHE["y"]
        return _chain(x)
