"""How does a fresh process's offset on a kernel span grow with the number of kernels in a forward? (#5)

span_parts.py (since deleted: bench/results/diagnostics.md; H100, 8 processes, relu(x + y) on 4M
floats) split each call's span into its two kernels and the gap between them: the add kernel ran
14.304 us in every process, while the gap (1.47 to 1.73 us) and the relu (8.03 to 8.24 us, reading
the add's output partly from L2) moved from process to process. `timing.kernel_span_process_bias_us`
(0.03 us) came from a one-kernel forward, whose span was the same in every process; the interval of a
many-kernel forward needs more.

Each of N fresh processes times with the harness's loop (hold, read flush, fresh inputs) a forward of
k kernels in a chain (relu, then k - 1 relus of the previous output) for k = 1, 2, 4, 8, 16, on 64K
and 1M floats, 200 calls each: first by events alone (CUPTI never on in the process yet), then by
kernel spans, with the events of those calls beside them. Printed per case and measure: the process
medians' standard deviation and range (us), the spread (max/min - 1), and each process's median.
Usage: python bench/diag/chain_bias.py [--procs 8]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

SIZES = {"64k": 1 << 16, "1m": 1 << 20}
CHAINS = (1, 2, 4, 8, 16)


def child() -> None:
    from small_spread import span_child
    torch, loop, rec, rng = span_child()

    class Runner:
        device, cache = "cuda", {}

        def __init__(self, n, k):
            self.torch, self.n, self.k = torch, n, k

        def timed_callable(self, variant):
            def fwd(x):
                y = torch.relu(x)
                for _ in range(self.k - 1):
                    y = torch.relu(y)
                return y
            return fwd

        def make_inputs(self, seed):
            g = torch.Generator(device="cuda").manual_seed(seed)
            return [torch.randn(self.n, device="cuda", generator=g)]

        def span_recorder(self):
            return rec

    out = {}
    # events first, before CUPTI's records were ever on in this process; then spans, with the
    # events of the same calls beside them
    for spans in (False, True):
        for size, n in SIZES.items():
            for k in CHAINS:
                rep = loop.time_calls(Runner(n, k), [rng.getrandbits(62) for _ in range(200)], warmup=5,
                                      flush_l2=True, npos=0, hold_us=300.0, spans=spans)
                ev = statistics.median(rep["times_ms"]) * 1e3
                if spans:
                    out[f"{size}x{k} span"] = statistics.median(x for x in rep["span_ms"] if x > 0) * 1e3
                    out[f"{size}x{k} events+cupti"] = ev
                else:
                    out[f"{size}x{k} events"] = ev
    print(json.dumps(out))


def main(procs: int) -> None:
    from small_spread import child_runs
    runs = child_runs(__file__, procs)
    print(f"{len(runs)} processes; kernel-span process medians (us)")
    print(f"{'case':>20} {'median':>8} {'sd':>7} {'range':>7} {'spread':>7}   per process")
    summary = {}
    for case in runs[0]:
        meds = [r[case] for r in runs]
        sd = statistics.stdev(meds) if len(meds) > 1 else 0.0
        summary[case] = {"median": statistics.median(meds), "sd": sd, "range": max(meds) - min(meds),
                         "spread": max(meds) / min(meds) - 1, "per_process": meds}
        print(f"{case:>20} {statistics.median(meds):8.3f} {sd:7.3f} {max(meds) - min(meds):7.3f} "
              f"{max(meds) / min(meds) - 1:7.2%}   " + " ".join(f"{m:.2f}" for m in meds))
    print(json.dumps(summary))


if __name__ == "__main__":
    from small_spread import entry
    entry(child, main, 8)
