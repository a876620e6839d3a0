"""harness/process/: a child process from both ends. The parent's Worker (process/worker.py): a
request's timeout leaves out the time the worker was stopped. The child's Runner (process/runner.py):
inputs drawn from their seed, and the dtype option casting inputs and both models."""
from __future__ import annotations

import threading
import time

import pytest
import torch
from conftest import ROOT, TESTS, read_expectation


def test_inputs_are_drawn_from_their_seed_and_leave_the_callers_generator_alone():
    from harness.process.runner import Runner
    from harness.records.messages import Setup
    setup = {"role": "reference", "problem_path": str(ROOT / "tests" / "problems" / "relu_add.py"),
             "solution_path": None, "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    runner = Runner(Setup(**setup))
    torch.manual_seed(99)
    state = torch.get_rng_state()
    x1, x2, y = runner.make_inputs(5), runner.make_inputs(5), runner.make_inputs(6)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(x1, x2))
    assert not torch.equal(x1[0], y[0])
    torch.manual_seed(5)  # the values torch.manual_seed's own stream gives: a reference's trial inputs
    with torch.device("cpu"):  # are the same whichever way the generators were seeded
        assert torch.equal(runner.problem.get_inputs()[0], x1[0])


def test_a_forward_that_draws_random_numbers_draws_the_same_on_both_sides():
    """Dropout in training mode (KernelBench's level2/66): each trial's and each timed call's forward
    starts from generators seeded for its inputs, so two processes with different histories (here:
    one ran an extra forward) give equal outputs, and equal fingerprints of their timed calls."""
    from harness.payload import decode
    from harness.process.runner import Runner
    from harness.records.messages import Setup
    from harness.timing.loop import time_calls
    setup = {"role": "reference", "problem_path": str(ROOT / "tests" / "problems" / "linear_dropout.py"),
             "solution_path": None, "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    a, b = Runner(Setup(**setup)), Runner(Setup(**setup))
    for r in (a, b):
        r.build(7)
    with torch.no_grad():
        b.forward(b.make_inputs(1))  # b's generators moved on
    (ta, _), (tb, _) = a.trials([3, 4], [{}, {}]), b.trials([3, 4], [{}, {}])
    outs = [[decode(b"".join(bytes(m) for m in blob))["out"] for blob in t] for t in (ta, tb)]
    assert len(outs[0]) == 2 and all(torch.equal(x, y) for x, y in zip(*outs))
    seeds = [11, 12, 13]
    fa = time_calls(a, seeds, warmup=1, flush_l2=False, npos=64)["fingerprints"]
    with torch.no_grad():
        b.forward(b.make_inputs(2))
    fb = time_calls(b, seeds, warmup=2, flush_l2=False, npos=64)["fingerprints"]
    assert fa == fb and len(fa) == len(seeds)


def test_dtype_option_casts_inputs_and_both_models():
    from conftest import ROOT, make_config
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "tests/fixtures/cpu/honest_linear_torch.py", ROOT / "tests/problems/linear_relu.py",
                 make_config(device="cpu", dtype="bf16"))
    assert r.status.value == "passed", r.error
    assert r.timing_method and r.config and r.config["dtype"] == "bf16"


@pytest.mark.parametrize("credit,resume_at,within", [(None, 1.8, (2.4, 4.0)), (0.5, 6.0, (1.4, 2.3))])
def test_a_workers_timeout_leaves_out_the_time_it_was_stopped(tmp_path, monkeypatch, credit, resume_at, within):
    """A neighbour's timing stops a worker mid-request: the request's timeout counts only the time
    it ran. Real process: a forward that never returns, 1 s of timeout, stopped for 1.5 s of it.
    Up to STOP_CREDIT_S of stops: a stopped process's GPU kernel runs on, and a kernel that never
    ends, stopped again and again by its neighbours' timing, would hold the device for ever (here:
    a credit of 0.5 s, stopped from 0.3 s on, times out at 1.5 s while still stopped)."""
    from harness.build import child_env
    from harness.process import worker as worker_mod
    from harness.process.worker import Worker, WorkerTimeout
    if credit is not None:
        monkeypatch.setattr(worker_mod, "STOP_CREDIT_S", credit)
    from harness.problems import find_problem
    from harness.records.messages import BuildCommand, TrialsCommand
    exp = read_expectation(TESTS / "fixtures" / "cpu" / "hang_forward.py")
    setup = {"role": "candidate", "problem_path": str(find_problem(exp.problem).path),
             "solution_path": str(exp.path), "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    w = Worker(setup, env=child_env(tmp_path / "ext", "cpu"))
    try:
        assert w.wait_reply("load", 120).ok
        assert w.request(BuildCommand(init_seed=1), 60)[0].ok
        assert not w.out_of_step
        stop, go = threading.Timer(0.3, w.pause), threading.Timer(resume_at, w.resume)
        stop.start(), go.start()
        t0 = time.perf_counter()
        with pytest.raises(WorkerTimeout):
            w.request(TrialsCommand(seeds=[1], shapes=[{}]), 1.0)
        waited = time.perf_counter() - t0
        go.cancel()
        w.resume()
        assert within[0] < waited < within[1], waited
        assert w.out_of_step  # its reply may still come: the worker is not to be asked again
        if credit is None:
            assert abs(w.stopped_for() - 1.5) < 0.2, w.stopped_for()
    finally:
        w.kill()
        w.close(grace=0)


def test_an_announced_frame_takes_memory_only_as_its_bytes_arrive():
    """A reply's frames are read into buffers sized by what the reply announces: 2 GiB announced
    and nothing sent cost the parent 2.2 GiB. The buffer's memory is taken only where bytes are
    written, and payload.decode maps tensors on it without a copy."""
    import os

    from harness import payload
    from harness.process.worker import new_frame

    def resident() -> int:  # bytes resident now (not the peak, which an earlier test may have set)
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = resident()
    frame = new_frame(2 << 30)
    assert len(frame) == 2 << 30
    grew_mb = (resident() - before) / 2**20
    assert grew_mb < 64, f"announcing 2 GiB took {grew_mb:.0f} MB"
    del frame

    t = torch.arange(1000, dtype=torch.float32)
    blob = b"".join(bytes(p) for p in payload.encode(torch, {"out": t}))
    frame = new_frame(len(blob))
    memoryview(frame)[:] = blob
    rec = payload.decode(frame)
    assert torch.equal(rec["out"], t)
    frame[-4:] = b"\0\0\0\0"  # the tensor is a view of the frame, not a copy
    assert rec["out"][-1].item() == 0.0
