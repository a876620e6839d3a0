"""Judging one correctness trial: never in a process that ran candidate code. Where the outputs are:
a CPU problem's, or a GPU problem's sent as bytes, in the parent; a GPU problem's that stayed on the
device (`Remote`, stages/check.py) in the reference's process, by this module's compare_tensors, on
the device, the parent judging the rest (form, structure, inputs) and calling `remote` for them.

A trial passes when the outputs have the reference's structure, exact type (`torch.Tensor`), device,
dtype and shape, NaN/inf in the same places, and values within tolerance by two tests:
elementwise |c - r| <= atol + rtol*|r|, and the relative L2 error ||c - r|| / ||r|| <= rel_l2. The
second is judged against the output's own scale, so writing zeros fails a softmax whose every value
is far below atol, and fp16 arithmetic fails an fp32 problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .config import Tolerance
from .payload import Remote, decode
from .records.result import TrialCheck

PLAIN_TENSOR = "torch.Tensor"


@dataclass
class TrialData:
    out: Any
    inputs_after: Optional[list]  # a candidate's: None when the call left them as they were
    out_meta: list[dict]
    inputs_before: Optional[list] = None
    token: Optional[int] = None  # a reference's outputs kept on the device: the trial's (TrialsReply.kept)
    custom_calls: Optional[int] = None  # a candidate's: calls into its extensions during the trial

    @property
    def remote(self) -> bool:
        """Outputs judged on the device: some of them stayed there."""
        return self.token is not None or any(isinstance(x, Remote) for x in _flatten(self.out))


class NeedBytes(Exception):
    """The reference kept an output on the device and the candidate sent that output's bytes (it could
    not export it): this trial is judged in the parent, from the reference's bytes too."""


@dataclass
class Verdict:
    check: TrialCheck
    flags: list[str] = field(default_factory=list)
    rejected: bool = False


def load_trial(blob, token: Optional[int] = None) -> TrialData:
    """A payload holds plain tensors, containers and scalars, nothing that runs code (harness.payload)."""
    rec = decode(blob)
    return TrialData(out=rec["out"], inputs_after=rec.get("inputs_after"), out_meta=rec["out_meta"],
                     inputs_before=rec.get("inputs_before"), token=token)


def _flatten(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    return [x]


def compare_tensors(c: torch.Tensor, r: torch.Tensor, tol: Tolerance,
                    chunk: Optional[int] = None) -> tuple[bool, dict[str, float], Optional[str]]:
    stats: dict[str, float] = {}
    if c.shape != r.shape:
        return False, stats, f"shape {tuple(c.shape)} != expected {tuple(r.shape)}"
    if c.dtype != r.dtype:
        return False, stats, f"dtype {c.dtype} != expected {r.dtype}"
    if r.dtype == torch.bool or not (r.is_floating_point() or r.is_complex()):
        ok = torch.equal(c, r)
        stats.update(max_abs_diff=0.0 if ok else float((c.double() - r.double()).abs().max()),
                     max_rel_diff=0.0 if ok else 1.0, rel_l2_diff=0.0 if ok else 1.0)
        return ok, stats, None if ok else "integer/bool values differ"
    if torch.equal(c, r):  # bit-identical (no NaN): nothing to measure
        stats.update(max_abs_diff=0.0, max_rel_diff=0.0, rel_l2_diff=0.0)
        return True, stats, None
    if r.is_complex() or not (bool(torch.isfinite(r).all()) and bool(torch.isfinite(c).all())):
        return _compare_nonfinite(c, r, tol, stats)
    # Everything finite: a chunk at a time, in the outputs' own precision (fp32, or fp32 for half
    # types), norms accumulated in fp64. A KernelBench output is up to 10^9 values: whole-tensor
    # temporaries (the difference, |ref|, the bound, each as big as the output) cost the parent 3x the
    # output's memory and, first-touched, most of 45-80 s of judging per solution on an H100 host.
    acc = _Sums()
    cflat, rflat = c.reshape(-1), r.reshape(-1)
    step = chunk or JUDGE_CHUNK
    for off in range(0, rflat.numel(), step):
        cc, rr = cflat[off:off + step], rflat[off:off + step]
        if cc.element_size() < 4:
            cc, rr = cc.float(), rr.float()
        acc.add(torch.sub(cc, rr).abs_(), rr, tol)
    return _judge(acc, rflat.numel(), tol, stats)


JUDGE_CHUNK = 1 << 22  # values per step of compare_tensors
GPU_JUDGE_CHUNK = 1 << 24  # on a device: fewer steps (each waits for the GPU), 64 MB temporaries
SQUARE_SAFE = 1e15  # a chunk's largest |value| within [1/this, this]: its squares sum in fp32 safely


class _Sums:
    """What judging needs of the differences, accumulated over chunks."""

    def __init__(self):
        self.bad, self.err_sq, self.ref_sq, self.max_abs, self.max_rel = 0, 0.0, 0.0, 0.0, 0.0

    def add(self, diff, ref, tol: Tolerance) -> None:
        """`diff`: |c - r| of a chunk (consumed), `ref`: r."""
        if not diff.numel():
            return
        ref_abs = ref.abs()
        self.bad += int(torch.count_nonzero(diff > ref_abs * tol.rtol + tol.atol))
        # per chunk in the chunk's precision (a BLAS dot: a conversion to fp64 took a third of the
        # time), summed over chunks in fp64; |ref| also serves complex outputs. Where a square could
        # leave fp32's range (values past 1e15, or all below 1e-15: an overflow to inf made a
        # correct output's error NaN, an underflow to 0 let zeros pass against tiny outputs), fp64
        d, ra = diff.reshape(-1), ref_abs.reshape(-1)
        d_max, r_max = float(diff.max()), float(ref_abs.max())
        top = max(d_max, r_max)
        if top > SQUARE_SAFE or 0 < top < 1 / SQUARE_SAFE:
            d, ra = d.double(), ra.double()
        self.err_sq += float(torch.dot(d, d))
        self.ref_sq += float(torch.dot(ra, ra))
        self.max_abs = max(self.max_abs, d_max)
        self.max_rel = max(self.max_rel, float(diff.div_(ref_abs.add_(tol.atol)).max()))


def _judge(acc: "_Sums", n: int, tol: Tolerance, stats: dict):
    err_norm, ref_norm = acc.err_sq ** 0.5, acc.ref_sq ** 0.5
    bad = acc.bad
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    stats.update(max_abs_diff=acc.max_abs, max_rel_diff=acc.max_rel, rel_l2_diff=rel_l2)
    if bad:
        return False, stats, f"{bad} of {n} values outside atol={tol.atol:g} + rtol={tol.rtol:g}*|ref|"
    if ref_norm == 0:
        ok = err_norm <= tol.atol * (n ** 0.5)
    else:
        ok = rel_l2 <= tol.rel_l2
    if not ok:
        return False, stats, f"relative L2 error {rel_l2:.3g} > {tol.rel_l2:g} (judged against the output's scale)"
    return True, stats, None


def _compare_nonfinite(c: torch.Tensor, r: torch.Tensor, tol: Tolerance, stats: dict):
    """NaN and inf must sit in the same places (inf with the same sign); the finite rest is judged
    as usual. In fp64, masked: the rare path."""
    wide = torch.complex128 if r.is_complex() else torch.float64
    cd, rd = c.to(wide), r.to(wide)
    c_nan, r_nan = torch.isnan(cd), torch.isnan(rd)
    if not torch.equal(c_nan, r_nan):
        return False, stats, f"NaN in {int(c_nan.sum())} places, expected {int(r_nan.sum())}"
    c_inf, r_inf = torch.isinf(cd), torch.isinf(rd)
    if not torch.equal(c_inf, r_inf) or not torch.equal(cd[r_inf], rd[r_inf]):
        return False, stats, "inf in different places"
    finite = ~(r_nan | r_inf)
    cf, rf = cd[finite], rd[finite]
    if rf.numel() == 0:
        stats.update(max_abs_diff=0.0, max_rel_diff=0.0, rel_l2_diff=0.0)
        return True, stats, None
    acc = _Sums()
    acc.add((cf - rf).abs(), rf, tol)
    return _judge(acc, rf.numel(), tol, stats)


def _inputs_equal(a: list, b: list, tol: Optional[Tolerance] = None) -> bool:
    fa, fb = _flatten(a), _flatten(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                return False
            if tol is None:
                if not torch.equal(x, y):
                    return False
            elif not compare_tensors(x, y, tol)[0]:
                return False
        elif isinstance(x, torch.Tensor) or x != y:
            return False
    return True


def _described(leaves: list, meta: list[dict]) -> bool:
    """Each output value is what its description says: a tensor where a tensor is described (with
    its device), nothing else where none is."""
    return len(leaves) == len(meta) and all(
        isinstance(x, (torch.Tensor, Remote)) == (m.get("device") is not None) for x, m in zip(leaves, meta))


# judges pairs (the reference's kept output, the candidate's exported one) where they are: the
# reference's process (stages/check.py). Returns per pair (ok, stats, reason)
RemoteJudge = Callable[[list[tuple[Remote, Remote]]], list[tuple[bool, dict, Optional[str]]]]


def judge_trial(index: int, shape_name: str, cand: TrialData, ref: TrialData, tol: Tolerance,
                remote: Optional[RemoteJudge] = None) -> Verdict:
    flags: list[str] = []
    # form: exact torch.Tensor, same structure, same device
    c_meta, r_meta = cand.out_meta, ref.out_meta
    not_plain = [m["type"] for m in c_meta if m.get("type") != PLAIN_TENSOR and m.get("device") is not None]
    if not_plain:
        return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                  reason=f"output is {not_plain[0]}, not exactly torch.Tensor"),
                       ["tensor_subclass"], rejected=True)
    if len(c_meta) != len(r_meta):
        return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                  reason=f"{len(c_meta)} outputs, expected {len(r_meta)}"))
    for cm, rm in zip(c_meta, r_meta):
        if cm.get("type") != rm.get("type"):
            return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                      reason=f"output type {cm.get('type')} != expected {rm.get('type')}"))
        if cm.get("device") != rm.get("device"):
            return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                      reason=f"output on {cm.get('device')}, expected {rm.get('device')}"))
    # the description is the child's to write, and so are the outputs: they must agree, leaf for leaf,
    # or a tree with fewer leaves (none) judged nothing, and a string where a tensor was described
    # reached compare_tensors and took the parent down
    c_leaves, r_leaves = _flatten(cand.out), _flatten(ref.out)
    if not _described(c_leaves, c_meta):
        return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                  reason="the outputs sent do not match their own description"),
                       ["malformed_report"], rejected=True)
    if len(c_leaves) != len(r_leaves):
        return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                  reason=f"{len(c_leaves)} output values, expected {len(r_leaves)}"))
    # outputs that stayed on the device are judged there, all of a trial's at once; the rest here
    pairs, far = [], {}
    for j, (c, r) in enumerate(zip(c_leaves, r_leaves)):
        if isinstance(c, Remote) and not isinstance(r, Remote):
            return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                      reason="an output was sent as a device handle where none was asked for"),
                           ["malformed_report"], rejected=True)
        if isinstance(r, Remote):
            if not isinstance(c, Remote):
                raise NeedBytes()
            if list(c.shape) == list(r.shape) and c.dtype == r.dtype:
                far[j] = len(pairs)
                pairs.append((r, c))
    if pairs:
        if remote is None:
            raise NeedBytes()
        judged = remote(pairs)
    worst: dict[str, float] = {}
    for j, (c, r) in enumerate(zip(c_leaves, r_leaves)):
        if isinstance(r, Remote):
            if j in far:
                ok, stats, reason = judged[far[j]]
            elif list(c.shape) != list(r.shape):
                ok, stats, reason = False, {}, f"shape {tuple(c.shape)} != expected {tuple(r.shape)}"
            else:
                ok, stats, reason = False, {}, f"dtype {c.dtype} != expected {r.dtype}"
        elif isinstance(r, torch.Tensor):
            ok, stats, reason = compare_tensors(c, r, tol)
        elif isinstance(c, torch.Tensor) or c != r:
            ok, stats, reason = False, {}, f"non-tensor output {c!r} != expected {r!r}"
        else:
            continue
        for k, v in stats.items():
            worst[k] = max(worst.get(k, 0.0), v)
        if not ok:
            return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False, reason=reason, **worst))
    # inputs: a candidate may change them only the way the reference does
    # (a candidate's child ships its inputs only when they differ from a copy taken before the call)
    before = ref.inputs_before if ref.inputs_before is not None else ref.inputs_after
    if cand.inputs_after is not None and not _inputs_equal(cand.inputs_after, before):
        if not _inputs_equal(cand.inputs_after, ref.inputs_after, tol):
            flags.append("input_mutated")
            return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=False,
                                      reason="the candidate changed its inputs (the reference does not)", **worst),
                           flags)
    return Verdict(TrialCheck(seed_index=index, shape=shape_name, ok=True, **worst), flags)
