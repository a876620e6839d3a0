"""The GPU kernels a forward ran, from CUPTI's activity API called directly (ctypes, no build).

torch.profiler gives the same list, but its first session in a process costs 4.4-5.9 s of host work
(Kineto's start-up), where enabling CUPTI's concurrent-kernel records directly costs 14-18 ms and a
listing 6-7 ms (bench/results/diagnostics.md, on an H200 machine with torch 2.11.0+cu130). Kernels
captured in CUDA graphs, launched by Triton or through the driver API all show up, as in the profiler.

A record's layout comes from cupti_activity.h. To be safe where CUPTI differs from the one measured,
`KernelRecorder.open` first lists a canary (a fill launched here) and checks the records read back
sane; it returns None where that fails or libcupti cannot be loaded, and the caller lists with
torch.profiler instead.
"""
from __future__ import annotations

import ctypes
import glob
import os
from typing import Any, Optional

CONCURRENT_KERNEL = 10  # CUpti_ActivityKind: CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (does not serialise kernels)
MEMCPY, MEMSET, MEMCPY2 = 1, 2, 22  # copies, fills and peer copies: GPU work that is not a kernel
# every one of these records holds its start and end (ns, CUPTI's clock: cuptiGetTimestamp) here
START, END = 16, 24
FLUSH_FORCED = 1  # CUpti_ActivityFlag: also the records of kernels still open
# CUpti_ActivityKind4 to 10 (CUDA 9 to 13) share this prefix; newer versions only append fields
GRID_X, BLOCK_X, NAME = 52, 64, 104
BUFFER_BYTES = 4 << 20
MAX_KERNELS = 4096  # the names kept per listing; a forward that launches more is listed in part
# recorders whose canary failed: CUPTI keeps their callbacks registered, so they must outlive it
_REFUSED: list = []

_REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                            ctypes.POINTER(ctypes.c_size_t))
_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_size_t)


def library_paths(torch: Any) -> list[str]:
    """libcupti where the CUDA runtime torch uses would find it: beside torch's own CUDA wheels
    first (the one Kineto loads), then the toolkit's."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    pats = [os.path.join(site, "nvidia", "cu*", "lib", "libcupti.so*"),
            os.path.join(site, "nvidia", "cuda_cupti", "lib", "libcupti.so*")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            pats += [os.path.join(home, "extras", "CUPTI", "lib64", "libcupti.so*"),
                     os.path.join(home, "lib64", "libcupti.so*"),
                     os.path.join(home, "targets", "*", "lib", "libcupti.so*")]
    found: list[str] = []
    for pat in pats:
        found += [p for p in sorted(glob.glob(pat)) if p not in found]
    return found


class KernelRecorder:
    """One per process: CUPTI's activity callbacks registered once, concurrent-kernel records enabled
    only between start() and stop()."""

    def __init__(self, lib: ctypes.CDLL, torch: Any, path: str):
        self.lib, self.torch, self.path = lib, torch, path
        self._buffers: dict[int, Any] = {}  # handed to CUPTI, by address
        # returned by CUPTI, for its next request: a new 4 MB buffer (zeroed) took 0.3 ms of every
        # timing request (bench/results/diagnostics.md)
        self._free: list[Any] = []
        self._names: list[str] = []
        self._bad = 0
        # span mode (timing.loop.time_calls): every activity's (start ns, end ns, kernel name, or
        # "<memcpy>" or "<memset>")
        self.spans: Optional[list[tuple[int, int, str]]] = None
        self._kinds = (CONCURRENT_KERNEL,)
        # kept on the instance: CUPTI calls these from its own threads for the process's life
        self._on_request, self._on_complete = _REQUEST(self._request), _COMPLETE(self._complete)
        if lib.cuptiActivityRegisterCallbacks(self._on_request, self._on_complete) != 0:
            raise OSError("cuptiActivityRegisterCallbacks failed")

    @classmethod
    def open(cls, torch: Any) -> tuple[Optional["KernelRecorder"], str]:
        """(a recorder whose canary listed right, "") or (None, why not)."""
        why = "libcupti not found"
        for path in library_paths(torch):
            try:
                rec = cls(ctypes.CDLL(path), torch, path)
            except OSError as e:
                why = f"{path}: {e}"
                continue
            probe = torch.empty(4096, device="cuda")
            rec.start()
            probe.fill_(1.0)
            names = rec.stop()
            if rec._bad or not any("Fill" in n for n in names):
                _REFUSED.append(rec)
                return None, f"{path}: the canary fill was not listed ({names[:3]}, {rec._bad} unreadable)"
            # span mode's canary: a fill and a device copy, each with a start and an end, in order
            rec.start(spans=True)
            t0 = rec.timestamp()
            probe.fill_(2.0)
            torch.empty_like(probe).copy_(probe)
            rec.stop()
            t1 = rec.timestamp()
            got = sorted(rec.spans or [])
            if rec._bad or len(got) != 2 or "Fill" not in got[0][2] or got[1][2] != "<memcpy>" or not t0 <= got[0][0] <= got[1][1] <= t1:
                _REFUSED.append(rec)
                return None, f"{path}: the canary's spans were not read right ({got}, {rec._bad} unreadable)"
            rec.spans = None
            return rec, ""
        return None, why

    def start(self, spans: bool = False) -> None:
        """spans: also keep every kernel's, copy's and fill's start and end (`self.spans`)."""
        self._names, self._bad = [], 0
        self.spans = [] if spans else None
        self._kinds = (CONCURRENT_KERNEL, MEMCPY, MEMSET, MEMCPY2) if spans else (CONCURRENT_KERNEL,)
        self.torch.cuda.synchronize()  # earlier work is not this listing's
        for kind in self._kinds:
            if self.lib.cuptiActivityEnable(kind) != 0:
                raise RuntimeError("cuptiActivityEnable failed")

    def stop(self) -> list[str]:
        """The names of the kernels run since start(), as launched (C++ names mangled)."""
        self.torch.cuda.synchronize()
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        for kind in self._kinds:
            self.lib.cuptiActivityDisable(kind)
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        return list(self._names)

    def timestamp(self) -> int:
        """Now, in the clock of the records' start and end (ns)."""
        t = ctypes.c_uint64()
        self.lib.cuptiGetTimestamp(ctypes.byref(t))
        return t.value

    def _request(self, buf, size, max_records) -> None:
        try:
            block = self._free.pop()
        except IndexError:
            block = ctypes.create_string_buffer(BUFFER_BYTES + 8)
        addr = (ctypes.addressof(block) + 7) & ~7  # CUPTI asks for 8-byte alignment
        self._buffers[addr] = block
        buf[0], size[0], max_records[0] = addr, BUFFER_BYTES, 0

    def _complete(self, _ctx, _stream, buf, _size, valid) -> None:
        try:
            rec = ctypes.c_void_p()
            while self.lib.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid),
                                                      ctypes.byref(rec)) == 0:
                kind = ctypes.c_uint32.from_address(rec.value).value
                if self.spans is not None and kind in (MEMCPY, MEMSET, MEMCPY2):
                    self._span(rec.value, "<memset>" if kind == MEMSET else "<memcpy>")
                if kind != CONCURRENT_KERNEL:
                    continue
                grid = ctypes.c_int32.from_address(rec.value + GRID_X).value
                block = ctypes.c_int32.from_address(rec.value + BLOCK_X).value
                ptr = ctypes.c_void_p.from_address(rec.value + NAME).value
                if not (grid > 0 and 0 < block <= 1024 and ptr and ptr > 4096):
                    self._bad += 1  # not the layout this reads: the canary fails, the profiler lists
                    continue
                name = ctypes.string_at(ptr).decode(errors="replace")
                if len(self._names) < MAX_KERNELS:
                    self._names.append(name)
                if self.spans is not None:
                    self._span(rec.value, name)
        finally:
            block = self._buffers.pop(buf, None)
            if block is not None and len(self._free) < 4:
                self._free.append(block)

    def _span(self, addr: int, name: str) -> None:
        t0 = ctypes.c_uint64.from_address(addr + START).value
        t1 = ctypes.c_uint64.from_address(addr + END).value
        if 0 < t0 <= t1:
            self.spans.append((t0, t1, name))
        else:
            self._bad += 1
