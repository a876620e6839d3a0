"""What makes a short forward's time alternate from one timing request to the next? (#5, session 22)

flush_placement.py: relu(x + y) on 4M floats reads about 23.9 and 24.9 us by kernel spans in
alternate requests of one process (100 calls each), whether the 256 MB flush buffer is one fixed
allocation or placed anywhere in a larger one. So the state is set by something else each request
makes. Each variant below runs in its own fresh process, `--requests` requests of `--calls` calls
(harness loop: 300 us hold, fresh inputs, spans), flush buffer fixed:
  base     as timing.loop.time_calls does it: a new scalar `sink` for the read flush's sum per request;
  sink     the sink allocated once and reused;
  write    the flush is a write (zero_ of the buffer): no sum, no sink;
  gc       base, with the garbage collector run and the device synchronised before each request;
  calls10  base at 10 calls per request (the harness's round), twice the requests;
  events   base without CUPTI: events only (their medians are printed, spans for the rest);
  cupti_on base with CUPTI's records left enabled between requests (the recorder only flushes);
  ev_fixed base with the start and end CUDA events made once and reused by every request;
  ev_fixed_events  the same, without CUPTI (events' medians);
  prealloc base with each call's inputs written into the same two tensors (only the forward allocates);
  empty_cache  base with the caching allocator emptied before each request.
Usage: python bench/diag/request_parity.py [--calls 100] [--requests 8] [--variants base,sink,...]
"""
from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

from small_spread import arg, relu_add_4m_child  # noqa: E402

VARIANTS = ("base", "sink", "write", "gc", "calls10", "events", "cupti_on", "ev_fixed", "ev_fixed_events", "prealloc",
            "empty_cache")


def child() -> None:
    torch, loop, runner, rng, rec = relu_add_4m_child()
    variant, calls, requests = arg("--variant", "base"), arg("--calls", 100), arg("--requests", 8)
    if variant == "calls10":
        calls, requests = 10, 2 * requests
    P = loop.PINNED
    zeros, empty = P["zeros"], P["empty"]
    held: dict = {}

    def fixed_zeros(n, **kw):  # the flush buffer: one allocation for the process
        if n < (32 << 20):
            return zeros(n, **kw)
        return held.setdefault(("z", n), zeros(n, **kw))

    def fixed_empty(shape, **kw):
        return held.setdefault(("e", tuple(shape) if isinstance(shape, (tuple, list)) else shape), empty(shape, **kw))

    P["zeros"] = fixed_zeros
    if variant == "sink":
        P["empty"] = fixed_empty
    if variant.startswith("ev_fixed"):
        Event, made = P["Event"], []

        def fixed_event(**kw):  # time_calls makes two per request: start, then end
            made.append(Event(**kw)) if len(made) < 2 else made.append(made.pop(0))
            return made[-1]
        P["Event"] = fixed_event
    if variant == "prealloc":
        fresh = runner.make_inputs
        keep: list = []

        def same_place(seed):  # new values, the same memory every call
            new = fresh(seed)
            if not keep:
                keep.extend(t.clone() for t in new)
            for dst, src in zip(keep, new):
                dst.copy_(src)
            return list(keep)
        runner.make_inputs = same_place
    if variant == "cupti_on":
        rec.lib.cuptiActivityDisable = lambda kind: 0
    out = []
    for _ in range(requests):
        if variant == "empty_cache":
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        if variant == "gc":
            gc.collect()
            torch.cuda.synchronize()
        rep = loop.time_calls(runner, [rng.getrandbits(62) for _ in range(calls)], warmup=5, flush_l2=True,
                              npos=0, hold_us=300.0, spans=not variant.endswith("events"),
                              flush_method="write" if variant == "write" else "read")
        times = rep["times_ms"] if variant.endswith("events") else [x for x in rep["span_ms"] if x > 0]
        out.append(round(statistics.median(times) * 1e3, 2))
    print(json.dumps(out))


def main() -> None:
    for v in arg("--variants", ",".join(VARIANTS)).split(","):
        p = subprocess.run([sys.executable, __file__, "--child", "--variant", v, "--calls", str(arg("--calls", 100)),
                            "--requests", str(arg("--requests", 8))], capture_output=True, text=True, timeout=300)
        if p.returncode:
            print(v, "failed:", p.stderr[-1500:])
            continue
        meds = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{v:8s} " + " ".join(f"{x:.2f}" for x in meds), flush=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
