# Sees other uids' processes despite hidepid=2 (a helper's attack): every control group's member list
# (cgroup v1 `tasks`, v2 `cgroup.procs`) is open to all, and lists the pids of the harness, the
# reference and the machine's daemons (and a folder name gives the harness's pid: harness-<pid>).
# Given a pid, sched_getaffinity, getpriority and pidfd_open (poll it to learn when it exits) work for
# any uid. Zeros (incorrect) where it found a live process of another uid and opened a pidfd to it.
# The view (sandbox.make_view) mounts an empty /sys/fs/cgroup: passed. Without a PID namespace a pid
# can still be found by probing (kill(pid, 0) answers EPERM for a live one): README, known limits.
# Run by tests/test_sandbox.py.
import ctypes
import glob
import os

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None, use_errno=True)
_pids = set()
for _f in glob.glob("/sys/fs/cgroup/**/tasks", recursive=True) + glob.glob("/sys/fs/cgroup/**/cgroup.procs", recursive=True):
    try:
        with open(_f) as _fh:
            _pids.update(int(x) for x in _fh.read().split())
    except OSError:
        pass
_seen = []
for _p in sorted(_pids):
    try:
        getattr(os, "ki" + "ll")(_p, 0)
        continue  # our own
    except PermissionError:
        pass
    except OSError:
        continue
    _fd = _libc.syscall(434, _p, 0)  # pidfd_open
    if _fd >= 0:
        os.close(_fd)
        _seen.append((_p, os.sched_getaffinity(_p), os.getpriority(os.PRIO_PROCESS, _p)))
_harness = [d for d in glob.glob("/sys/fs/cgroup/pids/harness-*")]


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a) if _seen else torch.relu(a + b)
