"""What timing.loop.time_calls' kernel spans rest on, for one process: each window's activities (name,
start and end relative to the window's opening, us) and the names the harness's own call ran.
Usage: python bench/diag/span_debug.py"""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))


def main() -> None:
    import torch

    from harness import cupti
    from harness.timing import loop
    from harness.timing.hold import pin
    from small_spread import relu_runner

    pin(torch)
    r = relu_runner(torch, 4096, 2)
    rec, why = cupti.KernelRecorder.open(torch)
    print("cupti:", why or "ok")
    r.span_recorder = lambda: rec
    seen = {}
    orig = loop.call_work

    def spy(acts, windows, harness):
        seen.update(acts=list(acts), windows=list(windows), harness=list(harness))
        return orig(acts, windows, harness)

    loop.call_work = spy
    rng = random.Random(1)
    for hold in (300.0,):
        rep = loop.time_calls(r, [rng.getrandbits(62) for _ in range(4)], warmup=2, flush_l2=True, npos=0,
                              hold_us=hold, spans=True)
        print("events us:", [round(x * 1e3, 2) for x in rep["times_ms"]], "spans us:", [round(x * 1e3, 2) for x in rep["span_ms"]])
        print("harness names:", [n[:60] for n in seen["harness"]])
        acts = sorted(seen["acts"])
        allw = seen["windows"]
        w_all = [(acts[0][0], acts[0][0])] + allw
        for k, (w0, w1) in enumerate(w_all):
            print(f"window {k}: {(w1 - w0) / 1e3:.1f} us")
        base = acts[0][0]
        for s, e, n in acts:
            print(f"  {(s - base) / 1e3:10.1f} {(e - s) / 1e3:8.2f}  {n[:70]}")
        print("windows (rel us):", [(round((a - base) / 1e3, 1), round((b - base) / 1e3, 1)) for a, b in allw])


if __name__ == "__main__":
    main()
