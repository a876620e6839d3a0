"""The GPU part of the suite: CUDA fixtures with their exact verdicts, the seed problems' CUDA
solutions, and recovery after a sticky CUDA error. Skipped where no CUDA device is present."""
from __future__ import annotations

import pytest

from conftest import ROOT, evaluate_fixture, fixtures_in, gpu, read_expectation, make_config

GPU_FIXTURES = fixtures_in("fixtures/gpu", "adversarial/gpu")


@gpu
@pytest.mark.parametrize("path", GPU_FIXTURES, ids=lambda p: p.name)
def test_gpu_fixture_verdict(path):
    exp = read_expectation(path)
    r = evaluate_fixture(exp, device="cuda")
    detail = f"error={r.error!r}\nlog={r.log_tail!r}\nflags={r.flags}"
    assert r.status.value == exp.status, detail
    assert sorted(f for f in r.flags if f not in exp.maybe) == sorted(exp.flags), detail
    if exp.status == "passed":
        assert r.env.gpu_name and r.timing_method["method"] in ("cuda_events", "kernel_span")
        rel = r.timing_method["process_bias_rel"]
        assert ("short_kernel" in r.flags) == (1.96 * rel > 0.01), detail
        assert r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1], r.speedup_ci
    # a GPU problem's outputs are judged on the device, in the reference's process (stages/check.py),
    # and from bytes in the parent only where the device could not (a handle that does not open)
    judged = {(t.judged_on or "").split(" ")[0] for t in r.trials}
    if path.name == "ipc_handle_unopenable.py":
        assert judged == {"parent"} and all("could not be mapped" in t.judged_on for t in r.trials), r.trials
    elif exp.status == "passed":
        assert judged == {"device"}, r.trials
    if "kernel_list" in r.timing_method:  # listed: through CUPTI directly, not the profiler's start-up
        assert r.timing_method["kernel_list"] == "cupti", r.timing_method
        assert r.phases.profiler_start_s < 1.0, r.phases


def cfg_bias(spans: bool) -> float:
    """The process offset of a one-launch forward, by the default config."""
    from harness.config import Timing
    t = Timing()
    return t.kernel_span_process_bias_us if spans else t.process_bias_us


@gpu
def test_a_kernel_of_a_few_microseconds_is_flagged_and_its_interval_widened():
    """relu(a + b) on 4096 floats takes a few us, timed by events (kernel spans off), where each
    process's own offset (about 0.1 us, timing.process_bias_us) moves a median by ±3% however many
    calls are timed: the speedup's interval says so, and so does the flag."""
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "solutions/relu_add/cuda_relu_add.py", ROOT / "tests/problems/relu_add.py",
                 make_config(device="cuda", size="small", **{"timing.kernel_span": "off"}))
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert r.timing_method["method"] == "cuda_events", r.timing_method
    assert r.runtime_ms < 0.02 and "short_kernel" in r.flags, (r.runtime_ms, r.flags)
    assert r.speedup_ci[1] / r.speedup_ci[0] > 1.1, r.speedup_ci


@gpu
def test_a_short_problem_is_timed_by_its_kernel_spans():
    """The same few-us problem with the defaults: both sides timed by their kernels' own span
    (CUPTI), which leaves out the GPU front end's start of the kernel that each process's events
    hold a different share of; the events are still taken, and say more."""
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "solutions/relu_add/cuda_relu_add.py", ROOT / "tests/problems/relu_add.py",
                 make_config(device="cuda", size="small"))
    tm = r.timing_method
    print(f"\nspans: cand={r.runtime_ms} ref={r.ref_runtime_ms} speedup={r.speedup} ci={r.speedup_ci} {tm}")
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert tm["method"] == "kernel_span" and "kernel_span_fallback" not in tm, tm
    assert 0 < r.runtime_ms < tm["events_median_ms"]["candidate"], tm
    assert 0 < r.ref_runtime_ms < tm["events_median_ms"]["reference"], tm
    assert r.runtime_stats.count >= 10 and r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1], r.speedup_ci
    # relu(a + b) launches two kernels, the solution its own one (a second only for a tail of the
    # vector): the reference's median carries the offset of one more dependent launch
    assert tm["launches_per_call"]["reference"] == 2 and tm["launches_per_call"]["candidate"] in (1, 2), tm
    assert tm["process_bias_us"]["reference"] > cfg_bias(spans=True) / 2, tm
    # that offset is a sizeable share of a few us: the reference is timed in several processes
    # (timing.processes, up to processes_max where they disagree, fewer where processes_budget_s is
    # spent first), each pair measured on its own; the candidate too where it launches two kernels
    # (a span of one is the same in every process)
    from harness.config import Timing
    n = tm["processes"]
    assert 2 <= n["reference"] <= Timing().processes_max, tm
    assert (n["candidate"] == 1) == (tm["launches_per_call"]["candidate"] == 1), tm
    assert len(tm["pair_medians_ms"]) == max(n.values()) and r.phases.processes_s > 0, tm
    assert tm["process_sd_us"]["reference"] > 0, tm


@gpu
def test_gpu_time_no_record_shows_falls_back_to_events():
    """A host function spinning 30 us in the candidate's stream is GPU time inside its interval
    that no kernel, copy or fill record shows: the spans would leave it out, so both sides are
    timed by events, and the record says why."""
    r = evaluate_fixture(read_expectation(ROOT / "tests/fixtures/gpu/host_function_in_stream.py"), device="cuda")
    tm = r.timing_method
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert tm["method"] == "cuda_events", tm
    assert "work no record shows" in tm["kernel_span_fallback"], tm
    assert tm["events_minus_span_us"]["candidate"] > tm["events_minus_span_us"]["reference"] + 20, tm
    assert r.runtime_ms > 0.03, r.runtime_ms  # the 30 us are in the candidate's time


@gpu
def test_illegal_address_is_followed_by_a_normal_verdict():
    from harness.evaluation import evaluate
    cfg = make_config(device="cuda")
    problem = ROOT / "tests/problems/relu_add.py"
    bad = evaluate(ROOT / "tests/adversarial/gpu/illegal_memory_access.py", problem, cfg)
    good = evaluate(ROOT / "solutions/relu_add/cuda_relu_add.py", problem, cfg)
    assert bad.status.value == "runtime_error" and "cuda" in ((bad.error or "") + (bad.log_tail or "")).lower()
    assert good.status.value == "passed", good.error


@gpu
@pytest.mark.parametrize("solution,problem", [
    ("solutions/gemm_scale_batchnorm/cuda_fused_epilogue.py", "problems/level2/gemm_scale_batchnorm.py"),
    ("solutions/gemm_batchnorm_scale_softmax/cuda_fused_bn_softmax.py", "problems/level2/gemm_batchnorm_scale_softmax.py"),
    ("solutions/relu_add/cuda_relu_add.py", "tests/problems/relu_add.py"),
])
def test_shipped_cuda_solutions_pass(solution, problem):
    from harness.evaluation import evaluate
    with_compile = "relu_add" in solution  # one live torch.compile baseline is enough here
    r = evaluate(ROOT / solution, ROOT / problem, make_config(
        device="cuda", **{"timing.budget_s": 2.5, "timing.compile_baseline": "on" if with_compile else "off"}))
    print(f"\n{solution}: {r.status.value} speedup={r.speedup} cand={r.runtime_ms} ref={r.ref_runtime_ms} "
          f"gpu={r.env.gpu_name if r.env else None} flags={r.flags} speedup_compile={r.speedup_compile} "
          f"ci={r.speedup_ci} timing_s={r.phases.timing_s:.2f} method={r.timing_method}")
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert r.speedup and r.speedup > 0
    if with_compile:
        assert r.speedup_compile and r.compile_runtime_ms > 0, r.timing_method


@gpu
def test_cuda_graph_timing_captures_both_sides():
    """timing.cuda_graph on, both forwards capturable: every timed call is a graph replay, unflagged."""
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "solutions/relu_add/cuda_relu_add.py", ROOT / "tests/problems/relu_add.py",
                 make_config(device="cuda", **{"timing.cuda_graph": True}))
    detail = f"error={r.error!r}\nlog={r.log_tail!r}\nflags={r.flags}\nmethod={r.timing_method}"
    assert r.status.value == "passed", detail
    assert r.timing_method["cuda_graph"] is True, detail
    assert "cuda_graph_unavailable" not in r.flags, detail
    assert r.speedup and r.speedup > 0, detail


@gpu
@pytest.mark.parametrize("fixture", ["graph_uncapturable.py", "graph_uncapturable_legacy_stream.py"])
def test_cuda_graph_falls_back_when_forward_cannot_be_captured(fixture):
    """An honest forward with a host sync (.item()) cannot be captured: both sides are timed eagerly
    instead, flagged cuda_graph_unavailable, and the verdict is unchanged. (The same fixture runs with
    the default config, graphs off, in test_gpu_fixture_verdict.)"""
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "tests/fixtures/gpu" / fixture, ROOT / "tests/problems/relu_add.py",
                 make_config(device="cuda", **{"timing.cuda_graph": True}))
    detail = f"error={r.error!r}\nlog={r.log_tail!r}\nflags={r.flags}\nmethod={r.timing_method}"
    assert r.status.value == "passed", detail
    assert "cuda_graph_unavailable" in r.flags, detail
    # its host sync makes its side host-bound, timed in several processes whose offsets may widen the
    # interval of its few-microsecond kernels past 1% (short_kernel, as the fixture's own header allows)
    assert sorted(set(r.flags) - {"short_kernel"}) == ["cuda_graph_unavailable"], detail
    assert ("short_kernel" in r.flags) == (1.96 * r.timing_method["process_bias_rel"] > 0.01), detail
    assert r.timing_method["cuda_graph"] is False, detail
    assert r.timing_method["method"] == "cuda_events", detail
    assert r.speedup and r.speedup > 0, detail


@gpu
def test_an_identical_launch_bound_solution_times_like_its_reference():
    """The same 24 launches on both sides, one kernel the solution's own: the speedup must be about 1.
    It pins that nothing done to the candidate's process alone (the profiler listing its kernels,
    which slows every later launch there about 4x) happens before it is timed."""
    r = evaluate_fixture(read_expectation(ROOT / "tests/fixtures/gpu/honest_launch_bound_ext.py"), device="cuda")
    detail = f"error={r.error!r}\nflags={r.flags}\nspeedup={r.speedup}\nmethod={r.timing_method}"
    # short_kernel: 24 launches of ~2 us each, under the ~70 us where each process's offset widens
    # the interval by more than 1% (timing.process_bias_us)
    assert r.status.value == "passed" and set(r.flags) <= {"short_kernel"}, detail
    # the kernel list was taken (after timing), the profiler started first outside the gate
    assert r.phases.profile_s is not None and r.phases.profiler_start_s is not None, detail
    assert 0.85 < r.speedup < 1.18, detail
    # counted in the warm-up round from CUPTI's records, though both are timed by events: 24 each,
    # so each median carries 23 launches' worth of its process's offset (timing.process_bias_us)
    assert r.timing_method["launches_per_call"] == {"candidate": 24, "reference": 24}, detail
    # the automatic hold covered both sides' launching (~0.3 ms per forward): both are device time,
    # but for a rare call the host stalls past it (1 of 30 seen on an H200)
    tm = r.timing_method
    assert tm["launch_hold_us"] > 300 and tm["timing_cpu"] is not None, detail
    calls = tm["rounds"] * tm["round_calls"]
    assert tm["cand_launch_leaked_calls"] <= 0.1 * calls and tm["ref_launch_leaked_calls"] <= 0.1 * calls, detail


@gpu
def test_the_launch_hold_lasts_as_asked_and_keeps_other_streams_off_the_gpu():
    """The hold is a kernel filling the GPU: work a forward launches on a side stream, which the
    interval's events do not see, cannot run hidden inside it, and must wait until it ends."""
    import torch

    from harness.timing.hold import pin, pinned
    pin(torch)
    hold = pinned("hold")
    assert hold is not None, "the hold kernel could not be built, or did not keep another stream waiting"
    side = torch.cuda.Stream()
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    E = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    rows = []
    for us in (50.0, 100.0, 400.0, 1500.0, 100.0):
        # its length: the GPU kept busy while the host launches it, so that the interval is the
        # kernel's own and not the Python launcher's too (an idle GPU read 100 us as 207 us once)
        d0, d1 = E(), E()
        hold(300.0)
        d0.record()
        hold(us)
        d1.record()
        torch.cuda.synchronize()
        # side-stream work launched while it runs on an otherwise idle GPU
        t0, t1, s1 = E(), E(), E()
        t0.record()
        hold(us)
        t1.record()
        with torch.cuda.stream(side):  # no wait on the current stream: free to start at once
            x.mul_(1.0001)
            s1.record()
        torch.cuda.synchronize()
        rows.append((us, d0.elapsed_time(d1) * 1e3, t0.elapsed_time(t1) * 1e3, t0.elapsed_time(s1) * 1e3))
    print("\nhold requested, its length, launched and held, side-stream work done (us):", rows)
    for us, length, held, side_done in rows[1:]:  # the first: the side stream's first use
        assert 0.8 * us < length < 1.25 * us + 50, rows
        assert side_done >= 0.95 * held, rows


@gpu
def test_gpu_fingerprints_accumulate_in_float32_within_the_tolerances_and_batch_like_single_calls():
    """On a GPU a fingerprint's sums accumulate in float32 (a float64 sum reads a float64 copy): they
    must stay far inside the fp32 tolerances fingerprints_match allows (1e-4 of the scale) at 16M
    elements, for outputs with and without a large mean; a batch of calls must fingerprint as each
    call alone does; and a stale output must still fail."""
    import random

    import torch

    from harness.config import load_config
    from harness.timing.fingerprint import OutputPrints, _fingerprint, fingerprints_match
    tol = load_config().correctness.tol["fp32"]
    torch.manual_seed(0)
    n = 1 << 24
    for x in (torch.randn(n, device="cuda"), 1000 + torch.randn(n, device="cuda"),
              torch.rand(n, device="cuda") / n):
        gpu = _fingerprint(torch, x, 5, 16)
        cpu64 = _fingerprint(torch, x.double(), 5, 16)  # float64 values accumulate in float64 (same signs)
        scale = cpu64[3]  # the L2 norm
        print("\nfloat32 on the GPU against float64: sum/abs-sum, abs-sum, L2, projection/L2 (rel):",
              [abs(gpu[1] - cpu64[1]) / cpu64[2], abs(gpu[2] - cpu64[2]) / cpu64[2], abs(gpu[3] - scale) / scale,
               abs(gpu[4] - cpu64[4]) / scale])
        assert abs(gpu[1] - cpu64[1]) <= 1e-6 * cpu64[2], (gpu[:5], cpu64[:5])  # sum, against the abs-sum
        assert abs(gpu[2] - cpu64[2]) <= 1e-6 * cpu64[2] and abs(gpu[3] - cpu64[3]) <= 1e-6 * scale
        assert abs(gpu[4] - cpu64[4]) <= 1e-5 * scale, (gpu[4], cpu64[4], scale)  # the projection
        assert gpu[6:] == cpu64[6:]  # the sampled values, exactly
        assert fingerprints_match(gpu, cpu64, tol)
    outs = [torch.randn(1 << 20, device="cuda") for _ in range(6)]
    seeds = [random.getrandbits(62) for _ in outs]
    prints = OutputPrints(torch, 64, len(outs), torch.cuda.mem_get_info()[0])
    for o, s in zip(outs, seeds):
        prints.add(o, s)
    prints.flush()
    assert prints.bufs is not None and prints.bufs[0].shape[0] == len(outs)  # batched, not one by one
    for fp, o, s in zip(prints.fps, outs, seeds):
        assert fingerprints_match(fp, _fingerprint(torch, o, s, 64), tol)
    assert not fingerprints_match(prints.fps[1], _fingerprint(torch, outs[0], seeds[1], 64), tol)


@gpu
def test_a_forked_standby_makes_its_cuda_context_and_serves_a_candidate():
    """Standbys forked from the slot's fork server (forkserver.py): the server must leave the CUDA
    driver uninitialised, or no child could use the GPU; one primed on the GPU then serves a
    candidate, which gets a fresh process's verdict."""
    import time

    from harness.build import child_env
    from harness.evaluation import evaluate
    from harness.process.standby import Standby
    sb = Standby(child_env(None, "cuda"), 1, prime="cuda")
    served = []
    take = sb.take
    sb.take = lambda *a, **k: served.append(take(*a, **k)) or served[-1]
    try:
        assert sb.server.ready(120) and sb.server.notes["fork_safe"], (sb.server.notes, sb.server.log_tail())
        # its children find the extension machinery imported, without the driver it would have asked
        assert sb.server.notes["cpp_extension"], sb.server.notes
        w = sb.idle
        deadline = time.monotonic() + 120
        while w.primed is None and w.returncode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w.forked and w.primed is not None and w.primed.notes["cuda_initialized"] == "True", w.log_tail()
        args = ROOT / "solutions/relu_add/cuda_relu_add.py", ROOT / "tests/problems/relu_add.py", make_config(device="cuda")
        r = evaluate(*args, standby=sb)
        assert served and served[0] is w
        assert r.status.value == evaluate(*args).status.value == "passed", (r.error, r.log_tail)
    finally:
        sb.close()


@gpu
def test_cupti_lists_the_kernels_a_forward_ran_as_the_profiler_does():
    """The kernel list through CUPTI called directly (cupti.py) gives the verdicts the profiler's
    gives, in milliseconds: no flag for a solution whose kernel runs, `no_custom_kernel` for one
    whose kernel is never launched. The recorder itself sees kernels that PyTorch, Triton and a CUDA
    graph launch, and only those run between start() and stop()."""
    import torch
    import triton
    import triton.language as tl

    from harness.cupti import KernelRecorder
    from harness.evaluation import evaluate

    for solution, flags in [(ROOT / "solutions/relu_add/cuda_relu_add.py", []),
                            (ROOT / "tests/fixtures/gpu/kernel_defined_never_launched.py", ["no_custom_kernel"])]:
        for method, seen_as in [("cupti", "cupti"), ("profiler", "torch.profiler")]:
            r = evaluate(solution, ROOT / "tests/problems/relu_add.py",
                         make_config(device="cuda", **{"correctness.kernel_list": method}))
            detail = (solution.name, method, r.status, r.error, r.flags, r.phases, r.timing_method)
            assert r.status.value == "passed" and sorted(set(r.flags) - {"short_kernel"}) == flags, detail
            assert r.timing_method["kernel_list"] == seen_as, detail
            assert (r.phases.profiler_start_s < 1.0) == (method == "cupti"), detail

    @triton.jit
    def harness_test_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    rec, why = KernelRecorder.open(torch)
    assert rec is not None, why
    x = torch.randn(1 << 16, device="cuda")
    y = torch.empty_like(x)
    torch.sigmoid(x)  # before start(): not listed
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.tanh(x)  # warm-up outside the capture
        with torch.cuda.graph(g, stream=s):
            torch.tanh(x)
    torch.cuda.synchronize()
    rec.start()
    harness_test_copy[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
    g.replay()
    names = rec.stop()
    assert any("harness_test_copy" in n for n in names), names
    assert any("tanh" in n for n in names), names
    assert not any("sigmoid" in n for n in names), names
    assert len(names) == 2, names


@gpu
def test_a_gpu_that_answers_is_not_taken_for_lost():
    """The batch's check after a failure (batch/health.py): the device each slot maps answers; an
    empty CUDA_VISIBLE_DEVICES (how the multi-GPU bench takes a GPU away) does not."""
    import time

    from harness.batch.health import gpu_lost
    t0 = time.perf_counter()
    assert gpu_lost({"CUDA_VISIBLE_DEVICES": "0"}) is None
    took = time.perf_counter() - t0
    assert "CUDA_ERROR_NO_DEVICE" in (gpu_lost({"CUDA_VISIBLE_DEVICES": ""}) or "")
    print(f"gpu_lost check: {took:.2f} s")


@gpu
@pytest.mark.skipif(__import__("harness.sandbox", fromlist=["available"]).available() is not None
                    or not __import__("harness.cgroups", fromlist=["confines"]).confines(),
                    reason="no sandbox with a cpuset group here")
def test_a_jailed_solution_on_a_gpu_is_timed_on_a_cpu_of_its_own_and_its_timers_miss_the_reference():
    """A GPU slot's reference is timed on a CPU no jail may run on, the candidate on one beside it
    (cpus.slot_cpus, sandbox.Jails.keep_off). interrupt_storm.py (launch_chain's forward, then 300
    timerfds re-armed to fire while the reference is timed, each watched through 1,660 epoll
    instances) lands its interrupts on its own CPU, which slows its own timed calls: they pass slower
    or, their host work out of step with what they report, are rejected (seen on an H100 and an H200).
    With one CPU shared by both sides (`[hardening] timing_cpus = "shared"`) the attack must not pay
    either, but it does reach the reference: the wall check's detail, printed beside an honest
    solution's, shows the reference's side slowed (on an H200 its floor 0.42-1.77 ms against 0.28-0.33),
    which loosens the check for hidden time."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from harness import cpus
    from harness.evaluation import evaluate
    from harness.sandbox import JAILS
    cache = Path(tempfile.mkdtemp(prefix="storm-gpu-"))
    os.chmod(cache, 0o755)
    attack, prob = ROOT / "tests/adversarial/sandbox/interrupt_storm.py", ROOT / "tests/problems/launch_chain.py"
    honest = cache / "launch_chain_same.py"  # the problem's own forward: the honest margin beside the storm's
    honest.write_text(prob.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    show = ("timing_cpu", "cand_timing_cpu", "ref_host_ms_median", "cand_host_ms_median", "wall_check")
    try:
        base = {"device": "cuda", "cache_dir": str(cache), "hardening.sandbox": "on"}
        apart = make_config(**base)
        assert apart.hardening.timing_cpus == "apart"
        for name, cfg in (("apart", apart), ("shared", make_config(**base, **{"hardening.timing_cpus": "shared"}))):
            r = evaluate(attack, prob, cfg)
            tm = r.timing_method or {}
            detail = f"{r.status} {r.speedup} {r.flags} {r.error} " + str({k: tm.get(k) for k in show})
            print(f"storm, CPUs {name}:", detail)
            h = evaluate(honest, prob, cfg)
            print(f"honest, CPUs {name}:", h.status, h.speedup, {k: (h.timing_method or {}).get(k) for k in show})
            assert "own_uid" in r.protections and r.status.value in ("passed", "rejected"), detail
            assert r.speedup is None or r.speedup < 1.25, detail
        ref_cpu, cand_cpu = cpus.slot_cpus(1, mode="apart")[0][0]
        if ref_cpu != cand_cpu:
            assert ref_cpu in JAILS._off and cand_cpu not in JAILS._off, (ref_cpu, cand_cpu, JAILS._off)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@gpu
def test_gpu_work_left_running_after_a_round_is_drained_before_the_reference():
    """A kernel the candidate leaves spinning when its round ends runs on while it is frozen, and the
    GPU time-slices it with the reference's round. Without the wait the reference's 2.7 ms matmul is
    slowed and an identical forward reads as a speedup; with it the reference is timed only once the
    GPU is quiet: the candidate's process locked through the driver (process/gpulock.py) where it
    can be, else (CUPTI attached to it) the reference's quiet probes before and after its round."""
    from harness.evaluation import evaluate
    exp = read_expectation(ROOT / "tests/adversarial/gpu/gpu_work_beside_reference.py")
    locked = evaluate_fixture(exp, device="cuda")
    probed = evaluate(exp.path, exp.problem, make_config(device="cuda", **exp.overrides, **{"timing.kernel_span": "on"}))
    left = evaluate(exp.path, exp.problem, make_config(device="cuda", **exp.overrides, **{"hardening.gpu_drain_s": 0}))
    for name, r in (("default", locked), ("spans", probed), ("left", left)):
        print(name, r.status.value, r.speedup, r.speedup_ci, r.flags, r.timing_method.get("cand_gpu_left_ms_max"),
              r.timing_method.get("cand_gpu_left_checks"), r.timing_method.get("method"), r.error)
    assert "gpu_checked_quiet_around_other_timed" in locked.protections, locked.protections
    # on the driver measured (580) CUPTI keeps every timed candidate from being locked: probed both times
    for r, how in ((locked, "default"), (probed, "spans")):
        assert r.status.value == "passed" and r.speedup < 1.2, (how, r.speedup, r.error)
        assert r.timing_method["cand_gpu_left_ms_max"] > 20 and "gpu_work_after_round" in r.flags, (how, r.timing_method)
        assert sum(r.timing_method["cand_gpu_left_checks"].values()) >= 1, (how, r.timing_method)
    assert probed.timing_method["method"] == "kernel_span" and probed.timing_method["cand_gpu_left_checks"].get("probed")
    assert left.status.value == "passed" and left.speedup > 1.4, (left.speedup, left.error)
    assert "cand_gpu_left_ms_max" not in left.timing_method
