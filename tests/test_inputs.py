"""A round's inputs made by the reference's process and read by both sides (harness/timing/inputs.py)."""
from __future__ import annotations

import os
import stat

import pytest

torch = pytest.importorskip("torch")

from harness.timing.inputs import RoundInputs, Unservable, write_round  # noqa: E402


class _Maker:
    """A runner's make_inputs: what a problem's get_inputs gives for a seed."""

    def __init__(self, make):
        self.torch, self.make, self.made = torch, make, []

    def make_inputs(self, seed):
        self.made.append(seed)
        return self.make(seed)


def _varied(seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(6, 8, generator=g)
    return [base, base.t(), base[1:, 2:5], torch.randint(0, 9, (5,), generator=g), torch.randn(3, generator=g).to(torch.bfloat16),
            torch.randn(2, generator=g).requires_grad_(), 7, (3, 3), [1, 2], None, torch.empty(0)]


def test_a_round_reads_back_as_made_in_fresh_buffers_with_views_shared_again(tmp_path):
    path = str(tmp_path / "r.inputs")
    said = write_round(_Maker(_varied), [11, 12, 13], path, 1 << 30)
    assert said["calls"] == 3 and said["bytes"] == os.path.getsize(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # the harness's; every jail may read it
    r = RoundInputs(torch, path)
    assert len(r) == 3
    for k, seed in enumerate((11, 12, 13)):
        want, got = _varied(seed), r.take(k)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            if isinstance(w, torch.Tensor):
                assert type(g) is torch.Tensor and g.dtype == w.dtype and g.shape == w.shape
                assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
                assert g.requires_grad == w.requires_grad and torch.equal(g.detach(), w.detach())
            else:
                assert g == w and type(g) is type(w)
        # the views of one tensor share one fresh storage, as get_inputs gave them
        assert got[0].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr() == got[2].untyped_storage().data_ptr()
        again = r.take(k)
        assert again[0].data_ptr() != got[0].data_ptr()  # each take its own buffers
        got[0].zero_()
        assert torch.equal(r.take(k)[0], want[0])  # a forward writing its inputs changes no later take
    r.close()


def test_a_round_stops_at_its_byte_cap_after_one_call_at_least(tmp_path):
    big = _Maker(lambda s: [torch.full((1 << 18,), float(s))])  # 1 MiB a call
    said = write_round(big, [1, 2, 3, 4], str(tmp_path / "a"), 2 << 20)
    assert said["calls"] == 2 and big.made == [1, 2]
    said = write_round(_Maker(lambda s: [torch.full((1 << 18,), float(s))]), [5, 6], str(tmp_path / "b"), 1)
    assert said["calls"] == 1
    assert torch.equal(RoundInputs(torch, str(tmp_path / "b")).take(0)[0], torch.full((1 << 18,), 5.0))


def test_inputs_the_file_cannot_carry_are_refused_and_no_file_is_left(tmp_path):
    path = tmp_path / "c"
    with pytest.raises(Unservable):
        write_round(_Maker(lambda s: [[torch.ones(2), torch.ones(2)]]), [1], str(path), 1 << 20)
    assert not path.exists()
    with pytest.raises(FileExistsError):  # never an existing file: a name planted before is refused
        path.write_bytes(b"x")
        write_round(_Maker(lambda s: [torch.ones(2)]), [1], str(path), 1 << 20)


def test_a_forward_moved_into_input_making_hides_where_each_side_makes_its_own_inputs():
    """The defence's need, shown: tests/adversarial/cpu/precompute_in_inputs.py, rejected with the
    reference's process making both sides' inputs (tests/test_verdicts.py), passes at a large
    speedup where each side makes its own, its forward hidden in the 85 ms of making them."""
    from conftest import TESTS, make_config, read_expectation

    from harness.evaluation import evaluate
    exp = read_expectation(TESTS / "adversarial" / "cpu" / "precompute_in_inputs.py")
    r = evaluate(exp.path, exp.problem, make_config(device="cpu", **{"timing.cpu_served_inputs": False}))
    assert r.status.value == "passed" and r.speedup > 3, (r.status, r.speedup, r.flags, r.error)
    assert r.timing_method["inputs_made_by"] == "own"


def test_an_honest_solution_is_timed_on_inputs_the_reference_made():
    from conftest import TESTS, evaluate_fixture, read_expectation
    r = evaluate_fixture(read_expectation(TESTS / "fixtures" / "cpu" / "honest_cpp.py"))
    assert r.status.value == "passed" and r.timing_method["inputs_made_by"] == "reference"
