# Finds other uids' live processes by probing pids, which no view of /proc hides: kill(pid, 0) answers
# EPERM for a live process it may not signal and ESRCH for no process, and a pid found so can be
# watched (pidfd_open: poll it to learn when the reference starts and ends). Zeros (incorrect) where
# it found one and opened a pidfd to it. Born in a PID namespace of its own (sandbox.born_apart), its
# pids are its own processes' only: nothing answers EPERM (passed).
# Run by tests/test_sandbox.py.
import errno
import os

import torch
import torch.nn as nn

_seen = []
for _p in range(1, 1 << 16):
    try:
        getattr(os, "ki" + "ll")(_p, 0)
    except OSError as _e:
        if _e.errno == errno.EPERM:
            try:
                os.close(os.pidfd_open(_p))
                _seen.append(_p)
            except OSError:
                pass
            if len(_seen) > 3:
                break


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _seen else torch.relu(a + b)
