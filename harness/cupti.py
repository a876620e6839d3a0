"""The GPU kernels a forward ran, from CUPTI's activity API called directly (ctypes, no build).

torch.profiler gives the same list, but its first session in a process costs 4.4-5.9 s of host work
(Kineto's start-up), where enabling CUPTI's concurrent-kernel records directly costs 14-18 ms and a
listing 6-7 ms (bench/diag/cupti_direct.py, on an H200 machine with torch 2.11.0+cu130). Kernels
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
FLUSH_FORCED = 1  # CUpti_ActivityFlag: also the records of kernels still open
# CUpti_ActivityKind4 to 10 (CUDA 9 to 13) share this prefix; newer versions only append fields
GRID_X, BLOCK_X, NAME = 52, 64, 104
BUFFER_BYTES = 4 << 20
MAX_KERNELS = 4096  # the names kept per listing; a forward that launches more is listed in part

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
        self._buffers: dict[int, Any] = {}
        self._names: list[str] = []
        self._bad = 0
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
                return None, f"{path}: the canary fill was not listed ({names[:3]}, {rec._bad} unreadable)"
            return rec, ""
        return None, why

    def start(self) -> None:
        self._names, self._bad = [], 0
        self.torch.cuda.synchronize()  # earlier work is not this listing's
        if self.lib.cuptiActivityEnable(CONCURRENT_KERNEL) != 0:
            raise RuntimeError("cuptiActivityEnable failed")

    def stop(self) -> list[str]:
        """The names of the kernels run since start(), as launched (C++ names mangled)."""
        self.torch.cuda.synchronize()
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        self.lib.cuptiActivityDisable(CONCURRENT_KERNEL)
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        return list(self._names)

    def _request(self, buf, size, max_records) -> None:
        block = ctypes.create_string_buffer(BUFFER_BYTES + 8)
        addr = (ctypes.addressof(block) + 7) & ~7  # CUPTI asks for 8-byte alignment
        self._buffers[addr] = block
        buf[0], size[0], max_records[0] = addr, BUFFER_BYTES, 0

    def _complete(self, _ctx, _stream, buf, _size, valid) -> None:
        try:
            rec = ctypes.c_void_p()
            while self.lib.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid),
                                                      ctypes.byref(rec)) == 0:
                if ctypes.c_uint32.from_address(rec.value).value != CONCURRENT_KERNEL:
                    continue
                grid = ctypes.c_int32.from_address(rec.value + GRID_X).value
                block = ctypes.c_int32.from_address(rec.value + BLOCK_X).value
                ptr = ctypes.c_void_p.from_address(rec.value + NAME).value
                if not (grid > 0 and 0 < block <= 1024 and ptr and ptr > 4096):
                    self._bad += 1  # not the layout this reads: the canary fails, the profiler lists
                    continue
                if len(self._names) < MAX_KERNELS:
                    self._names.append(ctypes.string_at(ptr).decode(errors="replace"))
        finally:
            self._buffers.pop(buf, None)
