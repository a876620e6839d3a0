# Wrong outputs (zeros) that pass by rewriting the judge's yardstick: at import, before the reference
# has started, it rewrites the problem's file so that the reference computes zeros too (the same
# holds for the harness's own bytecode, a problem's __pycache__, the build cache or results.jsonl).
# As the harness's uid it rewrites the file, which changes nothing where the processes run the bytes the
# parent read (Setup.problem_source); as a uid of its own the file is not
# its to write and the wrong outputs are judged (incorrect). Run by tests/test_sandbox.py on a copy
# of a problem, never on the repository's.
import os

import torch
import torch.nn as nn

_target = os.environ.get("ATTACK_PROBLEM_COPY", "")
try:
    with open(_target) as f:
        _text = f.read()
    with open(_target, "w") as f:
        f.write(_text.replace("return torch.relu(a + b)", "return torch.zeros_like(a)"))
except OSError:
    pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
