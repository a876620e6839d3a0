"""A candidate's GPU outputs read by the reference's process where they lie, through CUDA IPC, so
that a GPU problem's outputs are judged on the device (stages/check.py) and never cross a pipe.

Before this, every trial of a KernelBench problem copied each side's outputs (up to gigabytes) to
the host, through a pipe, into the parent, and judged them there on the CPU: on an H100 host
level2/16's five 2.1 GB trials took 64 of its 72 s of evaluation.

The candidate's process exports each output's allocation (`export`, in its own process: the
candidate's to forge, like everything it sends). The reference's process maps it (`Mapped`) only
after checking that the range it was told of lies inside what the handle maps: a forged offset or
size is refused unread and rejects the candidate (`malformed_report`). A handle that does not open
proves nothing (a driver or container may not share memory at all): that trial is judged from bytes. The driver API is called through ctypes:
torch's own sharing (torch.multiprocessing) also maps a reference-count file named by the sender,
which the reference would then write to.
"""
from __future__ import annotations

import ctypes
from typing import Optional

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
_LAZY_PEER = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]  # c_char would stop at the first zero byte


class IpcError(RuntimeError):
    """A driver call failed; `code` is its CUresult."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what}: CUDA driver error {code}")
        self.code = code


_lib: Optional[ctypes.CDLL] = None


def _driver() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        _lib = lib
    return _lib


def _check(what: str, code: int) -> None:
    if code:
        raise IpcError(what, code)


def _range(ptr: int) -> tuple[int, int]:
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check("cuMemGetAddressRange", _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr))
    return base.value, size.value


def export(t) -> dict:
    """The node a device tensor (contiguous, on this process's GPU) travels as: its allocation's handle
    and where in the allocation it lies. The caller keeps `t` alive until the reference has read it."""
    ptr = t.data_ptr()
    base, size = _range(ptr)
    h = _Handle()
    _check("cuIpcGetMemHandle", _driver().cuIpcGetMemHandle(ctypes.byref(h), base))
    return {"ipc": bytes(h.reserved).hex(), "offset": ptr - base}


class _Interface:
    """What torch.as_tensor reads to view device memory it does not own (numba's protocol)."""

    def __init__(self, ptr: int, shape: tuple):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}


class Refused(Exception):
    """The candidate's node does not describe memory it exported: rejected, never read."""


class Mapped:
    """The candidate's exported outputs, mapped into this process for as long as the `with` lasts:
    `tensor(node, dtype, shape, nbytes)` views one (read only by convention: the reference never writes
    it). Each handle is opened once, however many outputs share its allocation."""

    def __init__(self, torch):
        self.torch = torch
        self._open: dict[str, tuple[int, int]] = {}  # handle hex -> (mapped base, mapped size)

    def tensor(self, node: dict, dtype: str, shape: list, nbytes: int):
        torch = self.torch
        hexed, offset = node.get("ipc"), node.get("offset")
        if not (isinstance(hexed, str) and len(hexed) == 2 * HANDLE_BYTES and isinstance(offset, int) and offset >= 0):
            raise Refused("a device output's handle is malformed")
        try:
            raw = bytes.fromhex(hexed)
        except ValueError:
            raise Refused("a device output's handle is not hex") from None
        if hexed not in self._open:
            h = _Handle.from_buffer_copy(raw)
            ptr = ctypes.c_uint64()
            code = _driver().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, _LAZY_PEER)
            if code:
                # not proof of a forgery (a driver or container without IPC refuses every handle):
                # the trial is judged from bytes instead
                raise IpcError("cuIpcOpenMemHandle", code)
            try:
                base, size = _range(ptr.value)
            except IpcError:
                _driver().cuIpcCloseMemHandle(ptr.value)
                raise
            self._open[hexed] = (ptr.value, base + size - ptr.value)
        base, size = self._open[hexed]
        dt = getattr(torch, dtype)
        if offset + nbytes > size or (base + offset) % dt.itemsize:
            raise Refused(f"a device output of {nbytes} bytes at offset {offset} lies outside the "
                          f"{size} bytes its handle maps, or is misaligned")
        if not nbytes:
            return torch.empty(shape, dtype=dt, device="cuda")
        # viewed as bytes, then reinterpreted: the interface has no name for the half and fp8 types
        raw_t = torch.as_tensor(_Interface(base + offset, (nbytes,)), device="cuda")
        return raw_t.view(dt).reshape(shape)

    def __enter__(self) -> "Mapped":
        return self

    def __exit__(self, *exc) -> None:
        self.torch.cuda.synchronize()  # no kernel may still read a mapping being closed
        for base, _ in self._open.values():
            _driver().cuIpcCloseMemHandle(base)
        self._open.clear()
