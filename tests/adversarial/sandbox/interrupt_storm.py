# problem: tests/problems/linear_relu.py
# Found by a helper: honest linear+relu, plus an interrupt storm aimed at the reference's rounds. K
# one-shot timerfds, each watched through ~1,660 epoll instances (the kernel's reverse-path limit),
# are re-armed on every forward to fire just after the solution's round. They fire in hard-irq
# context on the CPU that armed them while the jail is frozen, charged to whatever runs there, no
# cgroup's CPU: with the reference timed on the same CPU (both sides held to one), 2.0-3.0x passed.
# The reference's CPUs are now kept from every jail (cpus.cpu_path_split; on a GPU each slot's
# reference CPU, cpus.slot_cpus): the storm lands on the solution's own CPU.
import ctypes, os, select, time, resource
import torch
import torch.nn as nn
import torch.nn.functional as F

K = 300
_libc = ctypes.CDLL(None, use_errno=True)
class _ts(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class _its(ctypes.Structure): _fields_ = [("i", _ts), ("v", _ts)]
_S = {}

def _setup():
    if _S:
        return
    if _S is not None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        k = min(K, max(0, (hard - 2000) if hard > 0 else 0))
        tfds = [_libc.timerfd_create(1, 0o4000) for _ in range(k)]
        tfds = [t for t in tfds if t >= 0]
        keep = []
        head = select.epoll(); keep.append(head)
        chain = head
        for n in (500, 100, 50, 10):           # nest first, timerfds after: cheap path checks
            lvl = [select.epoll() for _ in range(n)]
            for l in lvl:
                l.register(chain.fileno(), select.EPOLLIN)
            keep += lvl; chain = lvl[0]
        flat = [select.epoll() for _ in range(999)]
        keep += flat
        for t in tfds:
            for e in flat:
                e.register(t, select.EPOLLIN)
            head.register(t, select.EPOLLIN)
        _S.update(tfds=tfds, keep=keep, last=None, gaps=[])

def _arm():
    now = time.clock_gettime(1)
    last = _S["last"]; _S["last"] = now
    if last is not None and now - last < 0.05:
        _S["gaps"] = (_S["gaps"] + [now - last])[-20:]
    g = sorted(_S["gaps"])[len(_S["gaps"]) // 2] if _S["gaps"] else 0.008
    start, span = now + 0.5 * g + 0.002, 9.0 * g
    tfds = _S["tfds"]; n = len(tfds)
    st = _libc.timerfd_settime
    for i, t in enumerate(tfds):
        at = start + span * i / n
        v = _its(_ts(0, 0), _ts(int(at), int((at % 1) * 1e9)))
        st(t, 1, ctypes.byref(v), None)


class ModelNew(nn.Module):
    """linear_relu's forward (given its two sizes), or launch_chain's (tests/test_gpu.py: given none),
    the storm armed after each."""
    def __init__(self, *sizes):
        super().__init__()
        self.linear = nn.Linear(*sizes) if sizes else None
        _setup()

    def forward(self, x):
        if self.linear is None:
            for _ in range(8):
                x = torch.tanh(x * 1.01 + 0.1)
            y = x
        else:
            y = F.relu(F.linear(x, self.linear.weight, self.linear.bias))
        _arm()
        return y
