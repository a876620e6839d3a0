# expect: status=rejected flags=malformed_report,excessive_speedup,no_custom_kernel
# problem: tests/problems/relu_add.py
# config: hardening.max_speedup=0.000001
# An honest forward whose process answers the re-check of an excessive speedup with no outputs at
# all: its first trials request is answered as usual, every later one empty (the child's own Runner
# patched, hidden from the static checks behind importlib/exec). Pairing the empty answer with the
# reference's outputs judged nothing, and the speedup was reported.
import importlib

import torch
import torch.nn as nn

_runner = importlib.import_module("harness." + "process.runner")
_real = _runner.Runner.trials
_calls = [0]
exec("def _fake(self, seeds, shapes):\n"
     "    _calls[0] += 1\n"
     "    return _real(self, seeds, shapes) if _calls[0] == 1 else ([], {})\n"
     "_runner.Runner.trials = _fake")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
