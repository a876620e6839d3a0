# expect: status=rejected flags=malformed_report,excessive_speedup,no_custom_kernel
# problem: tests/problems/relu_add.py
# config: hardening.max_speedup=0.000001
# An honest forward whose process answers the re-check of an excessive speedup with no outputs at
# all: its trials requests are answered as usual until it has been timed, every later one empty (the
# child's own Runner patched, hidden from the static checks behind importlib/exec). Pairing the
# empty answer with the reference's outputs judged nothing, and the speedup was reported.
import importlib

import torch
import torch.nn as nn

_runner = importlib.import_module("harness." + "process.runner")
_real_trials, _real_time = _runner.Runner.trials, _runner.Runner.time
_timed = [False]
exec("def _fake(self, seeds, shapes, *a, **kw):\n"
     "    return ([], {}) if _timed[0] else _real_trials(self, seeds, shapes, *a, **kw)\n"
     "def _time(self, cmd):\n"
     "    _timed[0] = True\n"
     "    return _real_time(self, cmd)\n"
     "_runner.Runner.trials = _fake\n"
     "_runner.Runner.time = _time")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
