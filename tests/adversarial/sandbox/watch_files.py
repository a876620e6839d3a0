# Watches the harness's folder with inotify: a helper's attack saw the reference start and import (its
# files opened and read), which no view hides, since the files must stay readable. This one only asks
# for a watch: zeros where it got one (incorrect), the right answer where inotify was refused (passed).
# Jailed, the seccomp filter refuses inotify_init and inotify_init1 (sandbox._filter); unjailed it runs.
# Run by tests/test_sandbox.py.
import ctypes
import os

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None, use_errno=True)
_fd = _libc.inotify_init1(0)
_watching = _fd >= 0 and _libc.inotify_add_watch(_fd, os.path.dirname(torch.__file__).encode(), 0x20) >= 0  # IN_OPEN


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _watching else torch.relu(a + b)
