"""Output fingerprints: a few numbers per output that stand for it across processes.

The child fingerprints every timed call's outputs (`OutputPrints`, batched after the calls); the parent
compares a candidate's fingerprint with the reference's for the same seed (`fingerprints_match`).
"""
from __future__ import annotations

import math
import random
from typing import Optional

# the projection's signs: one fixed +-1 pattern per output size, the same in every process (a
# candidate's and the reference's fingerprints of one output must agree)
_SIGN_SEED = 0x5167_A5ED
_SIGNS: dict = {}
PRINT_BUFFER_BYTES = 256 << 20  # a timing request's copies of its outputs, fingerprinted together


def leaf_tensors(torch, out) -> list:
    """The tensors of a forward's output: itself, or those of a tuple or list (a subclass among them,
    read by isinstance only)."""
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def _reduced_as(torch, t):
    """The dtype a fingerprint reduces `t` in: the common float types as they are; others (integers,
    bool, float8, which has next to no arithmetic) through float64."""
    return t.dtype if t.dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16) else torch.float64


def _signs(torch, n: int, device):
    key = (str(device), n)
    if key not in _SIGNS:
        if len(_SIGNS) >= 4:  # a process times one or two output sizes; never hold many
            _SIGNS.clear()
        gen = torch.Generator(device=device).manual_seed(_SIGN_SEED)
        _SIGNS[key] = torch.randint(0, 2, (n,), generator=gen, device=device, dtype=torch.int8) * 2 - 1
    return _SIGNS[key]


def _accumulator(torch, b):
    """Float32 accumulation (of float64 outputs, float64): a float64 sum of a float32 tensor reads a
    float64 copy of it, made first, and four such sums were most of the fingerprint's GPU time. The
    GPU reduces in a tree, within 1e-6 of float64 at 16M elements (tests/test_gpu.py). A CPU's
    float32 norms and dot products ran up to 2% off there; its float32 sums are cascaded, so a CPU
    takes every term as a sum, in chunks (_head_cpu)."""
    return torch.float32 if b.dtype != torch.float64 else torch.float64


CPU_CHUNK = 1 << 18  # elements a row per step of _head_cpu: its scratch stays in the caches


def _head_cpu(torch, b, acc):
    """_head on a CPU: each term a cascaded sum in `acc` of a chunk, into a reused scratch, the
    chunks' sums added in float64. Whole-row temporaries (|b|, b*b, s*b: a fresh 64 MB each for a
    16M-float output) and float64 conversions made the four terms 280 ms of such an output, most of
    a CPU call's harness time: work a solution's process could do faster and spend on a hidden
    forward (the wall test compares that time with the reference's)."""
    rows, n = b.shape
    out = torch.zeros((rows, 4), dtype=torch.float64)
    signs = _signs(torch, n, b.device)
    w = min(n, CPU_CHUNK)
    x, t = torch.empty((rows, w), dtype=acc), torch.empty((rows, w), dtype=acc)
    for i in range(0, n, w):
        c = b[:, i:i + w]
        k = c.shape[1]
        xc, tc = x[:, :k], t[:, :k]
        xc.copy_(c)  # the output's own values in `acc` (half types widened before squaring)
        out[:, 0] += xc.sum(1)
        out[:, 1] += torch.abs(xc, out=tc).sum(1)
        out[:, 2] += torch.mul(xc, xc, out=tc).sum(1)
        out[:, 3] += torch.mul(xc, signs[i:i + k], out=tc).sum(1)
    out[:, 2] = out[:, 2].sqrt()
    return out


def _head(torch, b, acc):
    """Per row of `b`: sum, abs-sum, L2 norm and the +-1 projection, accumulated in `acc`."""
    if not b.is_cuda:
        return _head_cpu(torch, b, acc)
    total = b.sum(1, dtype=acc)
    # summed as it is: 2 * sum(b over s = 1) - sum(b) cancels, and in float32 the output's mean
    # then shows (1e-4 of the L2 norm at a mean of 1000 over 16M elements)
    proj = (b * _signs(torch, b.shape[1], b.device)).sum(1, dtype=acc)  # s * b is exact
    return torch.stack([total, torch.linalg.vector_norm(b, 1, dim=1, dtype=acc),
                        torch.linalg.vector_norm(b, 2, dim=1, dtype=acc), proj], 1).to(torch.float64)


def _prints(torch, blocks: list, seeds: list[int], npos: int) -> list[list[float]]:
    """The fingerprints of len(seeds) calls at once: `blocks` holds, per output tensor, a (calls, n)
    tensor of its flattened values, one row per call (see _fingerprint)."""
    f64 = torch.float64
    parts = []  # per output tensor: n, k, and its (calls, 4 + k) values on the device
    for b in blocks:
        n = b.shape[1]
        if not n:
            parts.append((0, 0, None))
            continue
        k = min(npos, n)
        pos = torch.tensor([[r.randrange(n) for _ in range(k)] for r in map(random.Random, seeds)],
                           dtype=torch.long, device=b.device)
        acc = _accumulator(torch, b)
        head = _head(torch, b, acc)
        # float32 squares overflow past 1.8e19 (level3/48_Mamba2ReturnY's outputs reach 1e22): a
        # row not finite is reduced again in float64, so an output that is finite prints finite
        if acc != f64 and not bool(torch.isfinite(head).all()):
            head = _head(torch, b, f64)
        parts.append((n, k, torch.cat([head, b.gather(1, pos).to(f64)], 1)))
    vals = [p[2] for p in parts if p[2] is not None]
    rows = (vals[0] if len(vals) == 1 else torch.cat(vals, 1)).cpu().tolist() if vals else [[] for _ in seeds]
    out = []
    for row in rows:
        fp: list[float] = []
        i = 0
        for n, k, v in parts:
            if v is None:
                fp += [0.0] * 6
                continue
            fp += [float(n)] + row[i:i + 4] + [float(k)] + row[i + 4:i + 4 + k]
            i += 4 + k
        out.append(fp)
    return out


def _fingerprint(torch, out, seed: int, npos: int) -> list[float]:
    """Per output tensor: [numel, sum, abs-sum, L2 norm, a +-1 projection, k, k values at positions].
    The positions come from the call's seed, so an output cached for other inputs does not match the
    reference's fingerprint for these even where sums agree; the projection's signs are fixed per
    output size (any error not orthogonal to them shows). A timing request fingerprints its calls in
    batches (OutputPrints); this is one call's."""
    blocks = [t.detach().reshape(1, -1).to(_reduced_as(torch, t)) for t in leaf_tensors(torch, out)]
    return _prints(torch, blocks, [seed], npos)[0]


class OutputPrints:
    """The fingerprints of a timing request's outputs. Each call's outputs are copied into a row of a
    buffer (one copy per output tensor, outside the interval), and a batch of rows is reduced at once
    after the calls: about a dozen small kernels, a readback and a synchronisation per call, and
    CUPTI records of them all, cost more host time than the forward they follow for a short
    problem. The buffer takes at most PRINT_BUFFER_BYTES and an eighth of
    the GPU's free memory; an output too large for two rows, and any on a CPU, is fingerprinted in
    place, call by call."""

    def __init__(self, torch, npos: int, calls: int, free_bytes: Optional[int] = None,
                 batch: Optional[bool] = None):
        self.torch, self.npos, self.calls = torch, npos, calls
        self.batch = batch  # None: outputs on a GPU only
        self.budget = min(PRINT_BUFFER_BYTES, (free_bytes // 8) if free_bytes else PRINT_BUFFER_BYTES)
        self.fps: list[list[float]] = []
        self.seeds: list[int] = []
        self.layout: Optional[list] = None  # per output tensor: (numel, reduced dtype, device)
        self.bufs: Optional[list] = None

    def add(self, out, seed: int) -> None:
        torch = self.torch
        ts = leaf_tensors(torch, out)
        layout = [(t.numel(), _reduced_as(torch, t), t.device) for t in ts]
        if self.seeds and (layout != self.layout or len(self.seeds) == self.bufs[0].shape[0]):
            self.flush()
        if layout != self.layout:
            self.layout, self.bufs = layout, None
            row = sum(n * dt.itemsize for n, dt, _ in layout)
            rows = min(self.calls, self.budget // max(row, 1))
            # on a CPU each call's outputs are reduced where they lie: batching saves kernels and
            # readbacks on a GPU; a CPU would only pay a copy into fresh rows (2 ms of a 4 MB output)
            batch = all(t.is_cuda for t in ts) if self.batch is None else self.batch
            if rows >= 2 and ts and batch:
                self.bufs = [torch.empty((rows, n), dtype=dt, device=dev) for n, dt, dev in layout]
        if self.bufs is None:
            self.fps.append(_fingerprint(torch, out, seed, self.npos))
            return
        i = len(self.seeds)
        for buf, t in zip(self.bufs, ts):
            buf[i].copy_(t.detach().reshape(-1))
        self.seeds.append(seed)

    def flush(self) -> None:
        if self.seeds:
            self.fps += _prints(self.torch, [b[:len(self.seeds)] for b in self.bufs], self.seeds, self.npos)
            self.seeds = []



def _close(x: float, y: float, tol: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= tol


def fingerprints_match(a: list[float], b: list[float], tol) -> bool:
    """Compare a candidate's fingerprint `a` with the reference's `b` (see _fingerprint).
    Elementwise |c - r| <= atol + rtol*|r| bounds a sum's error by numel*atol + rtol*abs-sum;
    ||c - r|| <= rel_l2*||r|| bounds the norms' difference by the same (triangle inequality) and a
    random-sign projection of the error by a few times that."""
    if len(a) != len(b):
        return False
    i = 0
    while i < len(b):
        n, k = b[i], int(b[i + 5])
        if a[i] != n or int(a[i + 5]) != k:
            return False
        bound_sum = n * tol.atol + tol.rtol * abs(b[i + 2])
        bound_l2 = tol.rel_l2 * abs(b[i + 3]) + 1e-12
        if not (_close(a[i + 1], b[i + 1], bound_sum) and _close(a[i + 2], b[i + 2], bound_sum)
                and _close(a[i + 3], b[i + 3], bound_l2) and _close(a[i + 4], b[i + 4], 6 * bound_l2)):
            return False
        for x, y in zip(a[i + 6:i + 6 + k], b[i + 6:i + 6 + k]):
            if not _close(x, y, tol.atol + tol.rtol * abs(y)):
                return False
        i += 6 + k
    return True
