"""harness/timing/fingerprint.py: the fingerprint of each timed call's outputs, matched against the
reference's, batched as each call alone, its sampled positions drawn from the call's seed."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import FP32

from harness.timing.fingerprint import fingerprints_match


def _fp(t, seed):
    from harness.timing.fingerprint import _fingerprint
    return _fingerprint(torch, t, seed, 16)


def test_fingerprint_matches_honest_and_catches_stale():
    """`honest` differs from `ref` as reordered float32 arithmetic does (1e-6 of each value, well
    inside the fp32 tolerances); `stale` is another call's answer."""
    torch.manual_seed(0)
    ref = torch.softmax(torch.randn(8, 4096), 1)
    honest = ref * (1 + 1e-6 * torch.randn_like(ref))
    stale = torch.softmax(torch.randn(8, 4096), 1)  # another call's answer: same sums, same scale
    assert fingerprints_match(_fp(honest, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(stale, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(torch.zeros_like(ref), 7), _fp(ref, 7), FP32)


def test_fingerprint_positions_follow_the_seed():
    """The sampled positions come from the call's seed (drawn on the output's device): the same seed
    reads the same elements, another seed others, so an answer cached for one call does not match
    the next call's fingerprint even where sums happen to agree."""
    out = torch.arange(4096, dtype=torch.float32)
    a, b, c = _fp(out, 11), _fp(out, 11), _fp(out, 12)
    assert a == b and a[:4] == c[:4]  # numel, sum, abs-sum, L2 norm: seed-free
    assert a[6:] != c[6:] and len(a[6:]) == 16 and all(0 <= v < 4096 for v in a[6:])
    assert _fp(torch.empty(0), 3) == [0.0] * 6


def test_a_timing_requests_outputs_are_fingerprinted_in_batches_as_each_call_alone():
    """OutputPrints copies each call's outputs into a row of a buffer and fingerprints a batch of
    rows at once: the same fingerprint as one call alone, whatever the batch (the candidate's and the
    reference's processes may batch differently); a batch ends where the buffer is full or the
    outputs change layout; an output too large for two rows is fingerprinted in place. Outputs on a
    CPU are batched only when asked (a copy into rows costs a CPU more than it saves)."""
    import random

    from harness.timing.fingerprint import OutputPrints, _fingerprint
    rng = random.Random(3)
    outs = [(torch.randn(1000), torch.randint(0, 5, (7,)), torch.empty(0)) for _ in range(5)]
    outs += [torch.randn(12), torch.randn(12).half(), torch.randn(12).half()]
    seeds = [rng.getrandbits(62) for _ in outs]
    single = [_fingerprint(torch, o, s, 16) for o, s in zip(outs, seeds)]
    row = 1000 * 4 + 7 * 8  # the integers reduce through float64
    for free, rows in ((None, len(outs)), (8 * 2 * row, 2), (8 * row, None)):
        prints = OutputPrints(torch, 16, len(outs), free, batch=True)
        seen = []
        for o, s in zip(outs[:5], seeds[:5]):
            prints.add(o, s)
            seen.append(prints.bufs[0].shape[0] if prints.bufs else None)
        assert seen == [rows] * 5
        for o, s in zip(outs[5:], seeds[5:]):
            prints.add(o, s)
        prints.flush()
        assert prints.fps == single
    plain = OutputPrints(torch, 16, len(outs))
    for o, s in zip(outs, seeds):
        plain.add(o, s)
    plain.flush()
    assert plain.bufs is None and plain.fps == single
    assert single[0][6 + 16:12 + 16] == [7.0, *single[0][7 + 16:11 + 16], 7.0]  # numel, sums, k of the integers
    assert single[0][-6:] == [0.0] * 6  # the empty tensor


def test_an_output_past_float32s_squares_prints_finite(monkeypatch):
    """level3/48_Mamba2ReturnY's outputs reach 1e22: a float32 L2 norm (the GPU's accumulator)
    overflows to inf, which crossed the pipe as null and made the reference's timing reply malformed
    (the problem failed, no record). A head not finite is reduced again in float64."""
    import harness.timing.fingerprint as fp
    monkeypatch.setattr(fp, "_accumulator", lambda torch, b: torch.float32)  # as on a GPU
    out = torch.full((4096,), 1e22)
    assert not torch.isfinite(fp._head(torch, out.reshape(1, -1), torch.float32)).all()  # the overflow
    print_ = fp._fingerprint(torch, out, 5, 4)
    assert all(map(math.isfinite, print_)) and print_[3] == pytest.approx(1e22 * 64, rel=1e-6)
    assert fingerprints_match(print_, fp._fingerprint(torch, out * (1 + 1e-7), 5, 4), FP32)


def test_a_timing_reply_carries_nan_and_infinities():
    """An honest output may hold NaN or inf (both sides alike); its fingerprint must cross the pipe
    as it is: pydantic writes them as null by default, which no float field reads back."""
    from harness.records.messages import REPLY, TimeReply
    rep = TimeReply(ok=True, times_ms=[1.0], fingerprints=[[1.0, math.nan, math.inf, -math.inf]])
    back = REPLY.validate_json(rep.model_dump_json())
    assert math.isnan(back.fingerprints[0][1]) and back.fingerprints[0][2:] == [math.inf, -math.inf]
