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
