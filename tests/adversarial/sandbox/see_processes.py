# Reads the command lines of processes that are not its own (the harness's parent, the reference, other
# solutions' processes): which run, problem and output folder they name, and, from /proc/<pid>/stat,
# when each runs. Its answer says whether it could: zeros where it read any other uid's (incorrect),
# the right answer where not (passed); any counts, since the reference may not have started yet when
# the candidate is imported. Every uid may read another's /proc entries; with its view of the machine
# (sandbox.make_view) its /proc is a proc of its own that shows no other uid's process (hidepid=2).
# Run by tests/test_sandbox.py.
import os

import torch
import torch.nn as nn

_proc = "/" + "pr" + "oc"  # past the static rule (introspection), as a real attack would write it
_seen = []
for _pid in os.listdir(_proc):
    if not _pid.isdigit():
        continue
    try:
        if os.stat(os.path.join(_proc, _pid)).st_uid == os.getuid():
            continue
        with open(os.path.join(_proc, _pid, "cmd" + "line"), "rb") as _fh:
            _seen.append((_pid, _fh.read()))
    except OSError:
        continue


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _seen else torch.relu(a + b)
