# Makes a user namespace (and a network namespace in it), where it is root: from there a helper's
# attack brought a loopback up and queued 2.3 GB of TCP buffers outside its memory cap. Its answer
# says whether it got one: zeros where it did (incorrect), the right answer where it did not
# (passed). Jailed, a seccomp filter refuses CLONE_NEWUSER (sandbox.no_user_namespaces); unjailed,
# as root, it gets one. Run by tests/test_sandbox.py.
import ctypes

import torch
import torch.nn as nn

import os

_libc = ctypes.CDLL(None, use_errno=True)
_pid = getattr(os, "fo" + "rk")()  # a user namespace needs a process of one thread: a fresh child
if _pid == 0:
    os._exit(0 if _libc.unshare(0x10000000 | 0x40000000) == 0 else 1)  # CLONE_NEWUSER | CLONE_NEWNET
_made = os.waitpid(_pid, 0)[1] == 0


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _made else torch.relu(a + b)
