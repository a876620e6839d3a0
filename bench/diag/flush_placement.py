"""Does where the L2 flush buffer lies decide a short forward's time? (#5, session 22)

request_drift.py found relu(x + y) on 4M floats two-valued from one timing request to the next in one
process, 24.2 or 25.1 us by kernel spans, every 4th request slow in a process left alone and every
request slow in one that freed its cached memory before each: something each request allocates
anew. timing.loop.time_calls allocates its 256 MB read-flush buffer per request. Here each process times
the forward with the harness's loop (300 us hold, read flush, fresh inputs, spans and events,
`--calls` per request) with the flush buffer
  fixed   allocated once, reused by every request (4 processes, 6 requests each);
  offset  a view into one 512 MB allocation at a given offset, swept 0-15 MB in 1 MB steps, twice,
          then at offsets under 1 MB (one process).
If the buffer's place decides it, "fixed" is constant within a process and two-valued between them,
and "offset" gives the same value for the same offset in both sweeps.
Usage: python bench/diag/flush_placement.py [--calls 100]
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

from small_spread import arg, relu_add_4m_child  # noqa: E402

FLUSH_MIN = 32 << 20  # elements: any zeros() this large is the flush buffer


def child() -> None:
    torch, loop, runner, rng, _ = relu_add_4m_child()
    calls, mode = arg("--calls", 100), sys.argv[sys.argv.index("--mode") + 1]
    zeros = loop.PINNED["zeros"]
    held: dict = {}
    base = zeros(128 << 20, dtype=torch.float32, device="cuda") if mode == "offset" else None
    where = {"off": 0}

    def flush_zeros(n, **kw):
        if n < FLUSH_MIN:
            return zeros(n, **kw)
        if mode == "fixed":
            if n not in held:
                held[n] = zeros(n, **kw)
            return held[n]
        off = where["off"] // 4
        return base[off:off + n]

    loop.PINNED["zeros"] = flush_zeros
    print(json.dumps({"ptr": base.data_ptr() if base is not None else None}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] != "go":
            break
        where["off"] = int(parts[1]) if len(parts) > 1 else 0
        rep = loop.time_calls(runner, [rng.getrandbits(62) for _ in range(calls)], warmup=5, flush_l2=True,
                              npos=0, hold_us=300.0, spans=True)
        out = {"span": round(statistics.median(x for x in rep["span_ms"] if x > 0) * 1e3, 3),
               "events": round(statistics.median(rep["times_ms"]) * 1e3, 3)}
        if mode == "fixed":
            out["ptr"] = next(iter(held.values())).data_ptr()
        print(json.dumps(out), flush=True)


def start(mode: str, calls: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, __file__, "--child", "--mode", mode, "--calls", str(calls)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    json.loads(p.stdout.readline())
    return p


def ask(p: subprocess.Popen, off: int = 0) -> dict:
    p.stdin.write(f"go {off}\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main() -> None:
    calls = arg("--calls", 100)
    print("fixed: each process's requests, span us (events us)")
    for i in range(4):
        p = start("fixed", calls)
        rs = [ask(p) for _ in range(6)]
        p.stdin.close()
        p.wait(timeout=60)
        print(f"  process {i}: " + "  ".join(f"{r['span']:.2f} ({r['events']:.2f})" for r in rs)
              + f"   buffer at {rs[0]['ptr'] % (1 << 30) >> 20} MB into its GB", flush=True)
    p = start("offset", calls)
    mb = 1 << 20
    for sweep in range(2):
        rs = [ask(p, k * mb) for k in range(16)]
        print(f"offset sweep {sweep + 1}, 0-15 MB: " + " ".join(f"{r['span']:.2f}" for r in rs), flush=True)
    fine = [0, 4096, 65536, 131072, 262144, 524288, 786432, 0]
    rs = [ask(p, k) for k in fine]
    print("offsets " + ",".join(str(k // 1024) + "K" for k in fine) + ": " + " ".join(f"{r['span']:.2f}" for r in rs))
    p.stdin.close()
    p.wait(timeout=60)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
