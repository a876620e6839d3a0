"""The wire format of one correctness trial (outputs and inputs of one forward), child to parent.

A JSON header then the tensors' raw bytes: no pickle, so a forged payload can carry nothing that
runs code, and the parent maps the bytes as tensors without copying. (torch.save and a weights_only
load cost about a second per 200 MB at each end; a full-size trial is often that big.)

    8 bytes: header length, little-endian | header (JSON) | tensor bytes, back to back

The header holds the record's tree with every tensor replaced by {"t": index}, and per tensor its
dtype, shape and byte count. Leaves besides tensors: None, bool, int, float, str.

A GPU output judged on the device (stages/check.py) stays where it is: under the record's "out" it
travels as {"dev": {...}}, its dtype, shape and byte count beside where to find it (a reference's
kept output by index, a candidate's by its CUDA IPC handle: cuda_ipc.py), and decodes as a `Remote`.
"""
from __future__ import annotations

import json
import math
import mmap
import struct
from typing import Any, Callable, Optional

_LEN = struct.Struct("<Q")
# what a payload may name; a dtype outside it is refused (the header is the candidate's to write)
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int8", "int16", "int32",
          "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2")
MAX_DEPTH = 32


# the reference's trials kept for a problem's later solutions, in bytes (in the parent where they
# travel as bytes, on the device in the reference's process where they stay there): beyond it, each
# solution's judging asks the reference process again (a forward, against memory held for as long as
# the problem has solutions to come)
TRIAL_CACHE_BYTES = 64 << 20

# device tensors travel through one pinned host buffer of this size, a slice at a time: the child
# never holds a host copy of a whole output (a KernelBench level-1 output is up to 17 GB)
CHUNK_BYTES = 64 << 20


class Encoded:
    """One payload, to be written in order: `size` bytes, produced by iterating (each buffer valid
    until the next is asked for). Host tensors are written from their own memory; device tensors
    are copied to the host a chunk at a time as the writer asks."""

    def __init__(self, torch, header: bytes, tensors: list, nbytes: list[int]):
        self.torch, self.header, self.tensors, self.nbytes = torch, header, tensors, nbytes
        self.size = len(header) + sum(nbytes)

    def __iter__(self):
        yield self.header
        staging = None
        for t, n in zip(self.tensors, self.nbytes):
            if not n:
                continue
            if t.device.type == "cpu":
                yield _view(t, n)
                continue
            flat = t.reshape(-1).view(self.torch.uint8)
            if staging is None:
                staging = self.torch.empty(min(CHUNK_BYTES, max(self.nbytes)), dtype=self.torch.uint8,
                                           pin_memory=t.device.type == "cuda")
            for off in range(0, n, len(staging)):
                k = min(len(staging), n - off)
                staging[:k].copy_(flat[off:off + k])  # synchronous: the bytes are there when yielded
                yield _view(staging, k)


def _view(t, n: int) -> memoryview:
    import ctypes
    raw = (ctypes.c_char * n).from_address(t.data_ptr())
    raw._owner = t  # the view keeps the tensor's memory alive
    return memoryview(raw).cast("B")


def encode(torch, record: dict, share: Optional[Callable[[Any], Optional[dict]]] = None) -> Encoded:
    """Child side: the payload, written by iterating it. Tensors must be plain (runner._plain), on
    the host or a device; anything else in the tree is written as its type's name. `share`: given each
    device tensor under record["out"] (contiguous), the node it travels as instead of its bytes, or
    None to send the bytes."""
    tensors: list = []

    def enc(x: Any, depth: int = 0, out: bool = False):
        if depth > MAX_DEPTH:
            raise ValueError("output nested too deeply")
        if isinstance(x, torch.Tensor):
            t = x.detach().contiguous()
            if out and share is not None and t.device.type == "cuda":
                node = share(t)
                if node is not None:
                    return {"dev": {**node, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                                    "nbytes": t.numel() * t.element_size()}}
            if t.device.type not in ("cpu", "cuda"):
                t = t.to("cpu")
            tensors.append(t)
            return {"t": len(tensors) - 1}
        if isinstance(x, (list, tuple)):
            return [enc(y, depth + 1, out) for y in x]
        if isinstance(x, dict):
            if depth == 0:
                return {"map": {str(k): enc(v, 1, k == "out") for k, v in x.items()}}
            return {"map": {str(k): enc(v, depth + 1, out) for k, v in x.items()}}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):  # JSON has no NaN or inf
            return x if math.isfinite(x) else {"float": repr(x)}
        return repr(type(x))

    tree = enc(record)
    del enc  # (as in decode: its closure would keep it, and the tensors, alive until the cycle collector runs)
    meta = [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
             "nbytes": t.numel() * t.element_size()} for t in tensors]
    header = json.dumps({"tree": tree, "tensors": meta}).encode()
    return Encoded(torch, _LEN.pack(len(header)) + header, tensors, [m["nbytes"] for m in meta])


class Remote:
    """A device output that stayed on the device: its form, and where it is (`node`: the sender's
    words, checked by whoever reads it)."""

    def __init__(self, dtype, shape: list[int], nbytes: int, node: dict):
        self.dtype, self.shape, self.nbytes, self.node = dtype, shape, nbytes, node

    def numel(self) -> int:
        return math.prod(self.shape)


def decode(blob) -> dict:
    """Parent side: the record, its tensors views of `blob` (kept alive by them), device outputs
    that stayed on the device `Remote`. Raises ValueError on anything malformed."""
    import torch
    buf = blob if isinstance(blob, (bytearray, mmap.mmap)) else bytearray(blob)  # frombuffer wants it writable
    if len(buf) < _LEN.size:
        raise ValueError("payload too short")
    (hlen,) = _LEN.unpack_from(buf, 0)
    if hlen > len(buf) - _LEN.size:
        raise ValueError("header length beyond the payload")
    try:
        head = json.loads(bytes(buf[_LEN.size:_LEN.size + hlen]))
        tree, metas = head["tree"], head["tensors"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable header: {e}") from None
    tensors, off = [], _LEN.size + hlen
    for m in metas:
        name, shape, nbytes = m.get("dtype"), m.get("shape"), m.get("nbytes")
        if name not in DTYPES or not isinstance(getattr(torch, name, None), torch.dtype):
            raise ValueError(f"dtype {name!r} not accepted")
        dtype = getattr(torch, name)
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError("bad shape")
        numel = math.prod(shape)
        if nbytes != numel * dtype.itemsize or off + nbytes > len(buf):
            raise ValueError("tensor bytes do not match its shape, or run past the payload")
        t = (torch.frombuffer(buf, dtype=dtype, count=numel, offset=off) if numel
             else torch.empty(0, dtype=dtype))
        tensors.append(t.reshape(shape))
        off += nbytes
    if off != len(buf):
        raise ValueError("trailing bytes after the last tensor")

    def dec(x: Any, depth: int = 0, out: bool = False):
        if depth > MAX_DEPTH:
            raise ValueError("payload nested too deeply")
        if isinstance(x, list):
            return [dec(y, depth + 1, out) for y in x]
        if isinstance(x, dict):
            if set(x) == {"t"} and isinstance(x["t"], int) and 0 <= x["t"] < len(tensors):
                return tensors[x["t"]]
            if set(x) == {"dev"} and out:
                return _remote(torch, x["dev"])
            if set(x) == {"map"} and isinstance(x["map"], dict):
                return {k: dec(v, depth + 1, out or (depth == 0 and k == "out")) for k, v in x["map"].items()}
            if set(x) == {"float"} and x["float"] in ("nan", "inf", "-inf"):
                return float(x["float"])
            raise ValueError("unknown node in payload")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise ValueError("unknown leaf in payload")

    if not (isinstance(tree, dict) and set(tree) == {"map"}):
        raise ValueError("payload is not a record")
    rec = dec(tree)
    # dec refers to itself through its closure, which holds `tensors`: left to the cycle collector,
    # every trial's frames stayed mapped until its next pass (128 MB a trial, measured)
    del dec
    return rec


def _remote(torch, node: Any) -> Remote:
    if not isinstance(node, dict):
        raise ValueError("bad device node")
    name, shape, nbytes = node.get("dtype"), node.get("shape"), node.get("nbytes")
    if name not in DTYPES or not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"dtype {name!r} not accepted")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError("bad shape")
    dtype = getattr(torch, name)
    if nbytes != math.prod(shape) * dtype.itemsize:
        raise ValueError("a device output's bytes do not match its shape")
    return Remote(dtype, shape, nbytes, {k: v for k, v in node.items() if k not in ("dtype", "shape", "nbytes")})
