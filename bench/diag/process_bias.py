"""What in a process sets the bias of a small kernel's median? (#5, session 9: small_spread.py found
relu on 64K floats 5.6% apart between fresh processes against 0.8% between blocks of one process, and
ruled out the inputs' placement, the clocks and the host.)

Each fresh process times relu on 64K floats with the harness's own child-side loop (timing.loop.time_calls:
hold, read flush, events, fresh inputs per call), 2 blocks of 40 calls per level of three factors
that are fixed for a process's life in the harness, interleaved level by level:
- stream: the default stream and 3 created ones (a stream maps onto one of the context's hardware
  channels; each process gets its own);
- flushbuf: 4 flush buffers at different addresses (time_calls allocates its flush buffer per call
  and the allocator hands back the same block; holding one of the same size in between forces a new one);
- code: 4 copies of one Triton relu kernel, distinct only in a constexpr the code ignores, so each is its
  own module at its own code address.
A factor behind the bias shows a spread between its levels inside one process close to the spread
between processes, and averaging over its levels shrinks the spread between processes.
Usage: python bench/diag/process_bias.py [--procs 6]"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
N, CALLS, LEVELS = 1 << 16, 40, 4


def child() -> None:
    import random

    import torch
    import triton
    import triton.language as tl

    from harness.timing import loop
    from harness.timing.hold import pin
    pin(torch)

    @triton.jit
    def relu_k(x_ptr, y_ptr, n, BLOCK: tl.constexpr, COPY: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(y_ptr + offs, tl.maximum(x, 0.0) + COPY * 0.0, mask=m)

    def triton_relu(copy):
        def f(x):
            y = torch.empty_like(x)
            relu_k[(triton.cdiv(N, 1024),)](x, y, N, BLOCK=1024, COPY=copy)
            return y
        return f

    class Runner:
        device, cache = "cuda", {}

        def __init__(self, fn):
            self.torch, self.fn = torch, fn

        def timed_callable(self, variant):
            return self.fn

        def make_inputs(self, seed):
            g = torch.Generator(device="cuda").manual_seed(seed)
            return [torch.randn(N, device="cuda", generator=g)]

    rng = random.Random()
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(LEVELS - 1)]
    flush_bytes = max(2 * torch.cuda.get_device_properties(0).L2_cache_size, 256 << 20)
    keep = []

    def block(fn, stream=None):
        with torch.cuda.stream(stream or streams[0]):
            rep = loop.time_calls(Runner(fn), [rng.getrandbits(62) for _ in range(CALLS)], warmup=3,
                                  flush_l2=True, npos=0, hold_us=300.0)
        torch.cuda.synchronize()
        return statistics.median(rep["times_ms"]) * 1e3

    out = {"stream": {}, "flushbuf": {}, "code": {}}
    for copy in range(LEVELS):  # compile and load every copy before anything is timed
        triton_relu(copy)(torch.randn(N, device="cuda"))
    for _ in range(2):
        for i, s in enumerate(streams):
            out["stream"].setdefault(str(i), []).append(block(torch.relu, s))
        for i in range(LEVELS):
            # the flush buffer freed by the last block is taken by this one, so the next is new memory
            keep.append(torch.empty(flush_bytes, dtype=torch.uint8, device="cuda"))
            out["flushbuf"].setdefault(str(i), []).append(block(torch.relu))
        for c in range(LEVELS):
            out["code"].setdefault(str(c), []).append(block(triton_relu(c)))
    print(json.dumps(out))


def main(procs: int) -> None:
    runs = []
    for _ in range(procs):
        p = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, timeout=300)
        if p.returncode:
            print(p.stderr[-3000:])
            raise SystemExit(1)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    spread = lambda xs: max(xs) / min(xs) - 1  # noqa: E731
    print(f"relu on {N} floats, {procs} processes, 2 blocks of {CALLS} calls per level; block medians in us")
    rows = []
    for factor in ("stream", "flushbuf", "code"):
        print(f"\n{factor}: per process, each level's two block medians")
        level_meds = []  # per process: the median of each level
        for i, r in enumerate(runs):
            lv = {k: statistics.median(v) for k, v in r[factor].items()}
            level_meds.append(lv)
            print(f"  proc {i}: " + "  ".join(f"{k}: {v[0]:.3f} {v[1]:.3f}" for k, v in r[factor].items()))
        within_levels = statistics.median(spread(list(lv.values())) for lv in level_meds)
        within_blocks = statistics.median(spread(v) for r in runs for v in r[factor].values())
        per_level_between = statistics.median(spread([lv[k] for lv in level_meds]) for k in level_meds[0])
        averaged_between = spread([statistics.fmean(lv.values()) for lv in level_meds])
        rows.append((factor, within_blocks, within_levels, per_level_between, averaged_between))
    print("\n| factor | same level, 2 blocks | between levels, one process | between processes, one level "
          "| between processes, mean over levels |")
    print("|---|---:|---:|---:|---:|")
    for f, a, b, c, d in rows:
        print(f"| {f} | {a:.2%} | {b:.2%} | {c:.2%} | {d:.2%} |")


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main(int(sys.argv[sys.argv.index("--procs") + 1]) if "--procs" in sys.argv else 6)
