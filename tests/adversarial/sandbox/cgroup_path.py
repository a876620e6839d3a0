# Reads its own control groups' paths (/proc/self/cgroup), which name the harness's group after the
# harness's own pid (harness-<pid>, a helper's attack): a pid to probe or watch where pids are the
# machine's. Zeros (incorrect) where a path names it. With its view, a jail's groups are its cgroup
# namespace's root (sandbox.enter): every path reads "/" (passed).
# Run by tests/test_sandbox.py.
import torch
import torch.nn as nn

with open("/" + "pr" + "oc/self/cgroup") as _fh:
    _named = "harness-" in _fh.read()


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _named else torch.relu(a + b)
