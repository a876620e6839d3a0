"""A timed round's inputs made by the reference's process, read by both sides (the CPU path).

Each side's wall for a round holds its inputs' making, and on the CPU that making can dwarf the
forward (`torch.randn` of a full-size relu_add: 430 ms a call against a 54 ms forward). A forward
moved into the candidate's own input making then hid in the noise of that overhead: 23-37x passed
with no timer touched (bench/results/clock-checks.md). So the reference's process, which runs no
solution code, makes a round's inputs before the round (`write_round`) into a file under the
harness's shared folder (sandbox.Jails.shared_folder: every jail may read it, none may list or write
it), named at random by the parent and told to a side only in its round's command; the candidate is
frozen while it is made. Each side maps each call's inputs from it (`RoundInputs.take`): the per-call
work left in the walls is a fraction of the making, so the wall test's floor, which follows it, is
as much tighter, and it is no more than any use of the inputs costs, so a candidate cannot undercut
it. Whatever a candidate's process does with its inputs, it does inside its wall.

The file: 8 bytes of header length, the pickled header (per call, one entry per input: a value, or a
tensor as its storage's index, dtype, size, stride, offset and requires_grad), then each storage's
bytes, page-aligned. Inputs that share a storage share it again when read.
"""
from __future__ import annotations

import copy
import ctypes
import mmap
import os
import pickle
import struct

ALIGN = mmap.PAGESIZE  # each storage maps on its own
CHUNK = 1 << 30  # a read(2) moves at most ~2 GiB at once


class Unservable(Exception):
    """Inputs this file cannot carry (a tensor inside a list, one not on the CPU): each side makes
    its own."""


def write_round(runner, seeds: list[int], path: str, max_bytes: int) -> dict:
    """Inputs for `seeds` in order, into a new file at `path` (0644, never an existing one), until
    the file holds `max_bytes` (at least one call). Returns {"calls": how many, "bytes": its size}."""
    torch = runner.torch
    calls: list[list] = []
    storages: list[tuple[int, int]] = []  # (offset, nbytes) in the file
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        body = []  # (storage, index): written after the header, whose length is known only then
        end = 0
        for seed in seeds:
            items, seen = [], {}
            for x in runner.make_inputs(seed):
                if isinstance(x, torch.Tensor):
                    if type(x) is not torch.Tensor or x.device.type != "cpu":
                        raise Unservable(f"an input of type {type(x).__name__} on {x.device}")
                    s = x.untyped_storage()
                    if s.data_ptr() not in seen:
                        seen[s.data_ptr()] = len(storages)
                        end = -(-end // ALIGN) * ALIGN
                        storages.append((end, s.nbytes()))
                        body.append(s)
                        end += s.nbytes()
                    items.append(("t", seen[s.data_ptr()], str(x.dtype).split(".")[-1], tuple(x.shape),
                                  tuple(x.stride()), x.storage_offset(), x.requires_grad))
                else:
                    if _holds_tensor(torch, x):
                        raise Unservable(f"a tensor inside a {type(x).__name__}")
                    items.append(("v", x))
            calls.append(items)
            if end >= max_bytes:
                break
        header = pickle.dumps({"calls": calls, "storages": storages}, protocol=pickle.HIGHEST_PROTOCOL)
        start = -(-(8 + len(header)) // ALIGN) * ALIGN
        os.write(fd, struct.pack("<Q", len(header)) + header)
        for (off, n), s in zip(storages, body):
            if n:
                view = _bytes_of(s.data_ptr(), n)
                for i in range(0, n, CHUNK):
                    _pwrite_all(fd, view[i:i + CHUNK], start + off + i)
        os.ftruncate(fd, start + end)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return {"calls": len(calls), "bytes": start + end}


def _holds_tensor(torch, x) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, (list, tuple)):
        return any(_holds_tensor(torch, y) for y in x)
    if isinstance(x, dict):
        return any(_holds_tensor(torch, y) for y in x.values())
    return False


def _bytes_of(address: int, n: int) -> memoryview:
    """n bytes of host memory at `address` as a writable memoryview (no numpy needed)."""
    return memoryview((ctypes.c_char * n).from_address(address)).cast("B")


def _pwrite_all(fd: int, view, at: int) -> None:
    while len(view):
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


class RoundInputs:
    """A round's file, opened by the side being timed: `take(i)` is call i's inputs.

    Each storage is the file's pages mapped copy-on-write (a forward that writes its inputs writes
    its own copies), each page touched once before the call (`_touch`: a read fault maps it), so the
    forward finds them mapped as freshly made inputs are. No copy: the per-call work left in a wall is
    what any use of the inputs costs, so a candidate cannot undercut it and spend the difference on a
    hidden forward, as one did when each side copied them into fresh buffers (a helper's attack:
    its own mapping instead of the copy, 55x on relu_add at full size)."""

    def __init__(self, torch, path: str):
        self.torch = torch
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        head, self.start = read_header(self.fd)
        self.calls, self.storages = head["calls"], head["storages"]

    def __len__(self) -> int:
        return len(self.calls)

    def take(self, i: int) -> list:
        torch = self.torch
        mapped: dict[int, object] = {}
        out = []
        for item in self.calls[i]:
            if item[0] == "v":
                out.append(copy.deepcopy(item[1]))  # a forward may change a list it is given
                continue
            _, k, dtype, size, stride, offset, grad = item
            if k not in mapped:
                off, n = self.storages[k]
                if n:
                    m = mmap.mmap(self.fd, n, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE,
                                  offset=self.start + off)
                    raw = torch.frombuffer(m, dtype=torch.uint8)
                    _touch(raw)
                else:
                    raw = torch.empty(0, dtype=torch.uint8)
                mapped[k] = raw.untyped_storage()
            t = torch.empty(0, dtype=getattr(torch, dtype)).set_(mapped[k], offset, size, stride)
            out.append(t.requires_grad_(grad) if grad else t)
        return out

    def close(self) -> None:
        os.close(self.fd)


def read_header(fd: int) -> tuple[dict, int]:
    """A round file's pickled header and where its body starts (page-aligned after it); read only
    from files the harness wrote (timing/clocked.py reads a candidate's slots file's layout from the
    reference's copy)."""
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    return pickle.loads(_pread_all(fd, n, 8)), -(-(8 + n) // ALIGN) * ALIGN


def _touch(raw) -> None:
    """One byte of every page read: each page's fault taken here, not in the timed forward."""
    raw[::mmap.PAGESIZE].sum()


def _pread_all(fd: int, n: int, at: int) -> bytes:
    buf = bytearray(n)
    _read_into(fd, memoryview(buf), at)
    return bytes(buf)


def _read_into(fd: int, view, at: int) -> None:
    while len(view):
        got = os.preadv(fd, [view[:CHUNK]], at)
        if got <= 0:
            raise EOFError("the round's inputs file ends early")
        view, at = view[got:], at + got
