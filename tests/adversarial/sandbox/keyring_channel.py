# Adds a key to the kernel's keyrings. A helper's attack added one to its uid's user keyring, opened
# it to every uid (KEYCTL_SETPERM), and read it from a later evaluation under another uid through
# /proc/keys and KEYCTL_READ: the keyring outlives every process of the uid, so it is a channel between
# evaluations (and keys pile up, one keyring per spent uid) that no view of the file system covers.
# This one adds to its own process's keyring (gone with it, so the test leaves nothing behind): what
# it tests is whether add_key runs at all. Zeros where it did (incorrect), the right answer where it
# was refused (passed). Jailed, the seccomp filter refuses add_key, request_key and keyctl
# (sandbox._filter); as root, unjailed, it runs. Run by tests/test_sandbox.py.
import ctypes

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None, use_errno=True)
_payload = b"for a later evaluation"
# add_key("user", name, payload, len, KEY_SPEC_PROCESS_KEYRING)
_added = _libc.syscall(248, b"user", b"harness-test-key", _payload, len(_payload), ctypes.c_int(-2)) > 0


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _added else torch.relu(a + b)
