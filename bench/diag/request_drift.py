"""Does a process's median on a short forward move from one timing request to the next? (#5, session 22)

group_offset.py found every one of 16 processes about 0.85 us slower (3.5% of relu(x + y) on 4M floats)
in its second measuring request than in its first, while stream_offset.py found a new stream's first
request 0.8 us slower than its second. Here, with the harness's loop (300 us hold, read flush, fresh
inputs, kernel spans and events of the same calls, `--calls` per request):
  A  one process, 8 requests back to back, then 3 more after 5 s idle;
  B  two processes taking turns, 6 requests each;
  C  two processes taking turns, each request preceded in the other process by a 256 MB allocation
     that is freed again (what another process's flush buffer does).
Each line: the request's span and events medians (us) and the GPU's temperature after it.
Usage: python bench/diag/request_drift.py [--calls 100]
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

from small_spread import arg, relu_add_4m_child  # noqa: E402


def child() -> None:
    torch, loop, runner, rng, _ = relu_add_4m_child()
    calls = arg("--calls", 100)
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "alloc":  # a neighbour's flush buffer, allocated and handed back to the driver
            x = torch.zeros(64 << 20, device="cuda")
            torch.cuda.synchronize()
            del x
            torch.cuda.empty_cache()
            print("{}", flush=True)
            continue
        if cmd != "go":
            break
        rep = loop.time_calls(runner, [rng.getrandbits(62) for _ in range(calls)], warmup=5, flush_l2=True,
                              npos=0, hold_us=300.0, spans=True)
        print(json.dumps({"span": round(statistics.median(x for x in rep["span_ms"] if x > 0) * 1e3, 3),
                          "events": round(statistics.median(rep["times_ms"]) * 1e3, 3),
                          "temp": pynvml.nvmlDeviceGetTemperature(h, 0)}), flush=True)


def start(calls: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, __file__, "--child", "--calls", str(calls)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def ask(p: subprocess.Popen, cmd: str = "go") -> dict:
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def stop(*ps: subprocess.Popen) -> None:
    for p in ps:
        p.stdin.close()
        p.wait(timeout=60)


def show(tag: str, r: dict) -> None:
    print(f"{tag:28s} span {r['span']:7.3f}  events {r['events']:7.3f}  {r['temp']} C", flush=True)


def main() -> None:
    calls = arg("--calls", 100)
    a = start(calls)
    for i in range(8):
        show(f"A request {i + 1}", ask(a))
    time.sleep(5)
    for i in range(3):
        show(f"A after 5 s idle, {i + 1}", ask(a))
    stop(a)
    a, b = start(calls), start(calls)
    for i in range(6):
        show(f"B turns: first {i + 1}", ask(a))
        show(f"B turns: second {i + 1}", ask(b))
    for i in range(6):
        ask(b, "alloc")
        show(f"C after alloc: first {i + 1}", ask(a))
        ask(a, "alloc")
        show(f"C after alloc: second {i + 1}", ask(b))
    stop(a, b)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
