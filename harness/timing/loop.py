"""The child's timing loop (`time_calls`).

One timed call per seed, each on fresh inputs generated from that seed in fresh buffers (on the CPU
path, read from the round's file the reference's process made: inputs.py; or, for a forward under 20 ms
on the CPU, each call timed by a clock process: clocked.py), L2 flushed
before the call (outside the measured interval), CUDA events around the call, then a device-wide
synchronize so work on any stream has finished before the output is fingerprinted. With kernel spans
on, each call's GPU work as CUPTI recorded it (`call_work`, `span_of`) is timed too.
"""
from __future__ import annotations

from .fingerprint import OutputPrints
from .hold import PINNED, gpu_hold, persisting_l2_reset, pin
from .inputs import RoundInputs
from .monitor import GpuMonitor


def _capture(torch, fn, inputs):
    """A CUDA graph of one forward on static input buffers; None if the forward cannot be captured."""
    prev = torch.cuda.current_stream()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn(*inputs)
        torch.cuda.synchronize()
        return g, out, inputs
    except Exception:
        # a capture that fails inside CUDA ends with torch.cuda.graph's __exit__ raising before it
        # restores the stream (and the RNG's and allocator's capture state: measure() restarts such
        # a candidate); the stream at least is put back, for a reference that failed cleanly
        torch.cuda.set_stream(prev)
        torch.cuda.synchronize()
        return None


def call_work(acts: list[tuple[int, int, str]], windows: list[tuple[int, int]],
              harness: list[str]) -> list[list[tuple[int, int, str]]]:
    """Each call's GPU activities (start ns, end ns, kernel name, or "<memcpy>" or "<memset>") that
    started inside its window (host timestamps in the same clock), less the harness's own,
    `harness`: the names a call without a forward ran (hold, the flush's fill of its semaphores and
    its reduction), the earliest-starting one of each name.

    A solution cannot shorten its span by naming kernels like the harness's: the earliest of a name
    is dropped, and the harness's own start first (hold) or queue behind the hold (flush), so a
    namesake that started earlier, on a stream of its own, makes the flush count instead. Work on
    another stream during the hold counts from its start."""
    import bisect
    acts = sorted(acts)
    starts = [a[0] for a in acts]
    out = []
    for w0, w1 in windows:
        inside = acts[bisect.bisect_left(starts, w0):bisect.bisect_right(starts, w1)]
        drop = list(harness)
        rest = []
        for a in inside:
            if a[2] in drop:
                drop.remove(a[2])
            else:
                rest.append(a)
        out.append(rest)
    return out


def span_of(work: list[tuple[int, int, str]]) -> float:
    """A call's kernel span (ms): from the first start to the last end of its work (call_work);
    -1.0 for a call with none."""
    return (max(a[1] for a in work) - min(a[0] for a in work)) / 1e6 if work else -1.0


def _gpu_monitor(runner) -> GpuMonitor:
    """The process's NVML handle, opened once: opening one (init, the max-clock query) took 1-2 ms a
    request."""
    if "monitor" not in runner.cache:
        runner.cache["monitor"] = GpuMonitor()
    return runner.cache["monitor"]


def _l2_flush(torch, runner, flush_method: str):
    """(flush, reset_l2): the L2 flush enqueued before each forward, a read of its buffer (a sum into
    a scalar) or a write, and the persisting-L2 reset (None where the runtime's cannot be found)."""
    P = PINNED
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
    # twice the L2, and at least 256 MB: the flush must also outlast the host's launch of the
    # forward, which is what keeps launch latency out of the interval (see time_calls)
    buf = P["zeros"](max(2 * l2, 256 << 20) // 4, dtype=torch.float32, device="cuda")
    if flush_method == "write":
        flush = buf.zero_
    else:
        sink, _sum = P["empty"]((), dtype=torch.float32, device="cuda"), P["sum"]
        flush = lambda: _sum(buf, 0, out=sink)  # noqa: E731
    if "reset_l2" not in runner.cache:  # looked up once: finding the library takes ~3 ms
        runner.cache["reset_l2"] = persisting_l2_reset()
    return flush, runner.cache["reset_l2"]


def _launch_hold(torch, flags: list[str]):
    """The pinned hold, for a request that asks for one; None, flagged launch_hold_unavailable, where
    this process has none that works."""
    if PINNED.get("hold") is None and not PINNED.get("hold_rechecked"):
        # the check at pin() ran beside other contexts' work (a standby primed, or a candidate
        # started, while other evaluations ran): time-slicing lets the side stream's kernel in while
        # the hold is switched out, and the check fails though the hold works on a quiet GPU. Here
        # the GPU is quiet, as it is for every timed call: check once more, in the same conditions.
        PINNED["hold_rechecked"] = True
        PINNED["hold"] = gpu_hold(torch)
    hold = PINNED.get("hold")
    if hold is None:
        flags.append("launch_hold_unavailable")
    return hold


def _span_recorder(runner, flags: list[str]):
    """(recorder, why not): the process's CUPTI recorder for kernel spans; None, flagged
    kernel_span_unavailable, with the runner's word on why, where it has none."""
    rec = runner.span_recorder() if hasattr(runner, "span_recorder") else None
    if rec is None:
        flags.append("kernel_span_unavailable")
        return None, getattr(runner, "span_why", None)
    return rec, None


def _shield(hold, hold_us: float, flush):
    """What precedes each forward on the GPU: the hold, then the flush (either may be None)."""
    def shield() -> None:
        if hold is not None:
            hold(hold_us)
        if flush is not None:
            flush()
    return shield


def _graph(torch, runner, fn, variant: str, seed: int):
    """The forward captured in a CUDA graph (_capture), once per process and variant; None where it
    cannot be captured."""
    key = ("graph", variant)
    if key not in runner.cache:
        runner.cache[key] = _capture(torch, fn, runner.make_inputs(seed ^ 0x6A6A))
    return runner.cache[key]


def _harness_window(rec, shield, sync) -> tuple[int, int]:
    """CUPTI's recording started, then a call without its forward: the window (CUPTI's clock, ns) of
    the kernels the harness itself runs in each call."""
    rec.start(spans=True)
    w0 = rec.timestamp()
    shield()
    sync()
    return w0, rec.timestamp()


def _kernel_spans(rec, windows: list[tuple[int, int]]) -> tuple[list[float], list[int]]:
    """Each call's kernel span, and its count of launches (the forward's kernels, copies and fills),
    from CUPTI's records in its window (call_work), less what the harness's own call (the first
    window) ran; the records are let go."""
    first = [a for a in rec.spans if windows[0][0] <= a[0] <= windows[0][1]]
    work = call_work(rec.spans, windows[1:], [a[2] for a in sorted(first)])
    rec.spans = None
    return [span_of(w) for w in work], [len(w) for w in work]


def _subclassed(torch, out) -> bool:
    """Whether any tensor of a forward's output is not exactly a torch.Tensor (read by type, which
    runs none of the object's code)."""
    if isinstance(out, (list, tuple)):
        return any(_subclassed(torch, o) for o in out)
    return isinstance(out, torch.Tensor) and type(out) is not torch.Tensor


def time_calls(runner, seeds: list[int], *, warmup: int, flush_l2: bool, npos: int,
               flush_method: str = "read", variant: str = "eager", graph: bool = False,
               hold_us: float = 0.0, spans: bool = False, inputs_path: str | None = None,
               slots_path: str | None = None, prints_of: str | None = None, clock_timeout_s: float = 60.0) -> dict:
    """One timed call per seed (see the module's docstring): the time reply's lists, one entry per
    call, and the flags of what this process could not do as asked."""
    torch = runner.torch
    cuda = runner.device == "cuda"
    fn = runner.timed_callable(variant)
    times: list[float] = []
    host: list[float] = []
    enqueue: list[float] = []
    launch: list[float] = []
    leaked = 0  # calls whose interval had opened before the forward was enqueued
    clocks: list[int] = []
    flags: list[str] = []
    clock = _gpu_monitor(runner) if cuda else None
    if not PINNED:  # the reference's process: no solution code in it, pinning now is as good
        pin(torch)
    if cuda:
        sync = PINNED.get("synchronize", torch.cuda.synchronize)
        Event = PINNED.get("Event", torch.cuda.Event)
    now = PINNED["perf_counter"]
    if slots_path is not None:  # a clocked round: the calls timed by the clock process (clocked.py)
        from .clocked import side_calls, snap_prints
        own = OutputPrints(torch, npos, len(seeds), batch=False) if runner.role == "reference" else None
        reply = side_calls(runner, seeds, slots_path, variant, clock_timeout_s, now, own)
        if prints_of is not None:
            reply["other_fingerprints"] = snap_prints(runner, prints_of, seeds, npos)
        return reply
    flush, reset_l2 = _l2_flush(torch, runner, flush_method) if cuda and flush_l2 else (None, None)
    hold = _launch_hold(torch, flags) if cuda and hold_us > 0 else None
    start, end = (Event(enable_timing=True), Event(enable_timing=True)) if cuda else (None, None)
    rec, span_why = _span_recorder(runner, flags) if cuda and spans else (None, None)
    prints = OutputPrints(torch, npos, len(seeds), torch.cuda.mem_get_info()[0] if cuda else None)
    served = RoundInputs(torch, inputs_path) if inputs_path else None
    if served is not None and len(served) != len(seeds):
        raise ValueError(f"the round's inputs hold {len(served)} calls for {len(seeds)} seeds")
    windows: list[tuple[int, int]] = []  # per call, CUPTI's clock (ns): from before the hold to after the sync
    shield = _shield(hold, hold_us, flush)
    report = {"times_ms": times, "host_ms": host, "enqueue_ms": enqueue, "launch_ms": launch,  # filled below
              "launch_leaked": leaked, "fingerprints": prints.fps, "clocks_mhz": clocks,
              "max_clock_mhz": clock.max_sm if clock else None, "flags": flags,
              "l2_reset": reset_l2 is not None, "span_ms": [], "span_launches": [], "span_why": span_why}
    with torch.no_grad():
        for k in range(warmup):
            fn(*runner.make_inputs(seeds[0] ^ (0x5EED + k)))
        captured = _graph(torch, runner, fn, variant, seeds[0]) if cuda and graph else None
        if cuda and graph and captured is None:
            # stop here: after a capture that failed inside CUDA this process may still be half
            # in capture mode, and the parent times both sides eagerly instead
            flags.append("cuda_graph_unavailable")
            return report
        if cuda:
            sync()
        if rec is not None:
            windows.append(_harness_window(rec, shield, sync))
        try:
            for k, seed in enumerate(seeds):
                inputs = served.take(k) if served is not None else runner.make_inputs(seed)
                runner.seed_forward(seed)  # its outputs are compared with the reference's (OutputPrints)
                if captured is not None:  # new values, copied into the graph's static buffers
                    for dst, src in zip(captured[2], inputs):
                        if isinstance(dst, torch.Tensor):
                            dst.copy_(src)
                if cuda:
                    sync()  # inputs ready; nothing else in flight
                if reset_l2 is not None:
                    reset_l2()
                w0 = rec.timestamp() if rec is not None else 0
                t0 = now()
                if cuda:
                    # Hold, flush and start event are enqueued back to back: the interval opens when
                    # they end on the GPU, while the host is already launching the forward, so they
                    # stay outside it and the forward's launching is hidden as in steady use, where
                    # the host runs ahead of the GPU (a synchronize here would put 10-80 us of launch
                    # latency into every sample, varying with the host). The hold comes first, so the
                    # flush is the last thing to touch L2 before the interval.
                    shield()
                    start.record()
                    t_enq = now()
                    if captured is not None:
                        captured[0].replay()
                        out = captured[1]
                    else:
                        out = fn(*inputs)
                    t_out = now()
                    enqueue.append((t_out - t_enq) * 1e3)
                    launch.append((t_out - t0) * 1e3)
                    end.record()
                    leaked += bool(start.query())
                    sync()  # device-wide: side streams included
                    if rec is not None:
                        windows.append((w0, rec.timestamp()))
                else:
                    out = fn(*inputs)
                t1 = now()
                host.append((t1 - t0) * 1e3)
                times.append(start.elapsed_time(end) if cuda else (t1 - t0) * 1e3)
                if clock is not None and clock.h is not None:
                    clocks.append(clock.sm() or 0)
                # before any torch call touches it: a subclass's __torch_function__ runs work the
                # interval left out (a helper's attack: 90% of the forward done by the fingerprint's
                # first op, 17.6x passed), and trials are judged on other calls' outputs
                if "tensor_subclass" not in flags and _subclassed(torch, out):
                    flags.append("tensor_subclass")
                prints.add(out, seed)
                del out, inputs
        finally:
            if rec is not None:
                rec.stop()
            if served is not None:
                served.close()
        prints.flush()  # after the recording: its kernels are not the calls'
        if rec is not None and len(windows) == len(times) + 1:
            report["span_ms"], report["span_launches"] = _kernel_spans(rec, windows)
    report["launch_leaked"] = leaked
    return report
