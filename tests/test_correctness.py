"""harness/correctness.py and harness/payload.py: an output judged against the reference's
(tolerances, NaN positions, shape and dtype are part of the answer) and the trial wire format that
carries outputs from the child."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import FP32

from harness.correctness import compare_tensors


def test_zeros_fail_tiny_softmax():
    # seeded: an unseeded draw put a value above 1e-4 in about 2% of runs (23 of 1000)
    ref = torch.softmax(0.1 * torch.randn(4, 16384, generator=torch.Generator().manual_seed(0)), dim=1)
    assert float(ref.max()) < 1e-4  # every value is inside atol of zero
    ok, _, reason = compare_tensors(torch.zeros_like(ref), ref, FP32)
    assert not ok and "relative L2" in reason


def test_fp16_arithmetic_fails_fp32_problem():
    x, w = torch.randn(64, 512), torch.randn(512, 256)
    ref = x @ w
    ok, stats, _ = compare_tensors((x.half() @ w.half()).float(), ref, FP32)
    assert not ok and stats["rel_l2_diff"] > 1e-4


def test_fp32_reordering_passes():
    x, w = torch.randn(64, 512, dtype=torch.float64), torch.randn(512, 256, dtype=torch.float64)
    ok, _, _ = compare_tensors((x.float() @ w.float()), (x @ w).float(), FP32)
    assert ok


def test_nan_must_match_positions():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    assert compare_tensors(ref.clone(), ref, FP32)[0]
    assert not compare_tensors(torch.tensor([1.0, 2.0, 3.0]), ref, FP32)[0]
    assert not compare_tensors(torch.tensor([float("nan")] * 3), ref, FP32)[0]


def test_shape_and_dtype_are_part_of_the_answer():
    ref = torch.randn(8)
    assert not compare_tensors(ref.double(), ref, FP32)[0]
    assert not compare_tensors(ref[None], ref, FP32)[0]


def test_trial_payload_round_trips_and_refuses_forgeries():
    """The trial wire format (harness.payload): tensors of every accepted dtype, nested sequences
    and scalars come back equal; a header that lies about its tensors, names a dtype outside the
    list, or holds an unknown node is refused with ValueError, never loaded."""
    import json
    import struct

    import torch

    from harness.payload import decode, encode
    rec = {"out": [torch.randn(3, 4), torch.tensor([True, False]), torch.zeros(0, 5),
                   torch.randn(2).to(torch.bfloat16), torch.arange(6, dtype=torch.int64).reshape(2, 3)],
           "inputs_after": [3, 1.5, float("nan"), float("-inf"), None, "x"], "out_meta": [{"type": "torch.Tensor"}]}
    blob = b"".join(encode(torch, rec))
    back = decode(blob)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(rec["out"], back["out"]))
    assert back["inputs_after"][:2] == [3, 1.5] and math.isnan(back["inputs_after"][2])
    assert back["inputs_after"][3:] == [float("-inf"), None, "x"] and back["out_meta"] == rec["out_meta"]

    def forged(tree, tensors, data=b""):
        head = json.dumps({"tree": {"map": tree} if isinstance(tree, dict) else tree, "tensors": tensors}).encode()
        return struct.pack("<Q", len(head)) + head + data

    ok = forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 8)
    assert torch.equal(decode(ok)["out"], torch.zeros(2))
    for bad in (forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [4], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 4),
                forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 12),
                forged({"out": {"t": 0}}, [{"dtype": "Tensor", "shape": [2], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"t": 1}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"__reduce__": "os.system"}}, []),
                forged(["not", "a", "record"], []),
                blob[:5]):
        with pytest.raises(ValueError):
            decode(bad)


def test_the_chunked_sums_keep_huge_and_tiny_outputs_in_range():
    """Squares summed in fp32 overflowed past |x| ~ 1e19 (a correct output judged 'relative L2 error
    nan') and underflowed below ~1e-19 (zeros passed against outputs that are all tiny, the case the
    relative L2 test exists for): such chunks are summed in fp64."""
    import torch

    from harness.config import Tolerance
    from harness.correctness import compare_tensors
    tol = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4)
    huge = torch.full((1000,), 1e30)
    close = huge.clone()
    close[0] *= 1 + 9e-5
    ok, stats, reason = compare_tensors(close, huge, tol)
    assert ok and stats["rel_l2_diff"] < 1e-5, reason
    ok, stats, reason = compare_tensors(torch.zeros(1000), torch.full((1000,), 1e-25), tol)
    assert not ok and stats["rel_l2_diff"] == 1.0 and "relative L2" in reason


def _forged_payload(tree, tensors=(), data=b""):
    import json
    import struct
    head = json.dumps({"tree": {"map": tree}, "tensors": list(tensors)}).encode()
    return struct.pack("<Q", len(head)) + head + data


def _dev(**node):
    return {"dev": {"dtype": "float32", "shape": [2, 3], "nbytes": 24, **node}}


def test_an_output_left_on_the_device_decodes_as_remote_only_among_the_outputs():
    """A GPU output judged on the device travels as a node naming where it is (payload.Remote): its
    form is checked like a tensor's, and such a node anywhere but under "out" (the inputs, which the
    parent compares itself) is refused."""
    from harness.payload import Remote, decode
    rec = decode(_forged_payload({"out": [_dev(ipc="ab" * 64, offset=0)], "out_meta": []}))
    r = rec["out"][0]
    assert isinstance(r, Remote) and r.shape == [2, 3] and r.dtype == torch.float32 and r.nbytes == 24
    assert r.node == {"ipc": "ab" * 64, "offset": 0}
    for bad in ({"out": _dev(nbytes=99), "out_meta": []},
                {"out": _dev(dtype="object"), "out_meta": []},
                {"out": _dev(shape=[-1, 3]), "out_meta": []},
                {"out": [], "out_meta": [], "inputs_after": [_dev(ipc="ab" * 64, offset=0)]},
                {"out": {"dev": 3}, "out_meta": []}):
        with pytest.raises(ValueError):
            decode(_forged_payload(bad))


def _remote_trials(c_out, r_out, meta):
    from harness.correctness import TrialData
    return (TrialData(out=c_out, inputs_after=None, out_meta=meta),
            TrialData(out=r_out, inputs_after=None, out_meta=meta, token=7))


def test_outputs_that_stayed_on_the_device_are_judged_there_and_the_rest_here():
    """judge_trial sends every pair of outputs left on the device to `remote` in one call (with the
    reference's kept output first), takes its answers in the outputs' order, judges host values
    itself, and checks the form of the far ones before asking: a shape that differs fails here."""
    from harness.correctness import NeedBytes, judge_trial
    from harness.payload import Remote

    def rem(idx, shape=(2, 3)):
        return Remote(torch.float32, list(shape), 4 * math.prod(shape), {"kept": idx} if idx is not None else {"ipc": "x"})

    meta = [{"type": "torch.Tensor", "device": "cuda"}] * 2 + [{"type": "builtins.int"}]
    asked = []

    def remote(pairs):
        asked.append([(r.node, c.node) for r, c in pairs])
        return [(True, {"max_abs_diff": 0.5}, None), (False, {"max_abs_diff": 2.0}, "values differ")]

    c, r = _remote_trials([rem(None), rem(None), 3], [rem(0), rem(1), 3], meta)
    v = judge_trial(0, "default", c, r, FP32, remote=remote)
    assert asked == [[({"kept": 0}, {"ipc": "x"}), ({"kept": 1}, {"ipc": "x"})]]
    assert not v.check.ok and v.check.reason == "values differ" and v.check.max_abs_diff == 2.0

    c, r = _remote_trials([rem(None), rem(None, (3, 2)), 3], [rem(0), rem(1), 3], meta)
    v = judge_trial(0, "default", c, r, FP32, remote=lambda pairs: [(True, {}, None)] * len(pairs))
    assert not v.check.ok and "shape (3, 2) != expected (2, 3)" in v.check.reason

    c, r = _remote_trials([rem(None), rem(None), 4], [rem(0), rem(1), 3], meta)
    v = judge_trial(0, "default", c, r, FP32, remote=lambda pairs: [(True, {}, None)] * len(pairs))
    assert not v.check.ok and "non-tensor output 4" in v.check.reason

    # the candidate sent bytes where the reference kept its output: judged from bytes on both sides
    c, r = _remote_trials([torch.zeros(2, 3), rem(None), 3], [rem(0), rem(1), 3], meta)
    with pytest.raises(NeedBytes):
        judge_trial(0, "default", c, r, FP32, remote=remote)
    # a device handle where the reference sent bytes: nobody asked for one
    c, r = _remote_trials([rem(None), torch.zeros(2, 3), 3], [torch.zeros(2, 3), torch.zeros(2, 3), 3], meta)
    v = judge_trial(0, "default", c, r, FP32)
    assert v.rejected and "malformed_report" in v.flags
