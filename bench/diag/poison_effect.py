"""Does the candidate's NaN poison (runner.Runner._poison: 25% of free memory, at most 8 GB, filled
and handed back to the caching allocator) change how fast its kernels run? (#5, session 9: identical
relu_add on 4M floats timed 1.8% faster in each of 5 fresh candidate processes than in the one
reference process, which is not poisoned, and relu on 64K floats 1.6-5.9% faster.)

Fresh processes alternate with and without the poison step, then time both kernels with the
harness's child-side loop (timing.time_calls). Usage: python bench/diag/poison_effect.py [--procs 8]"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from small_spread import KERNELS, relu_runner  # noqa: E402  (this folder is on sys.path first)


def child(poison: bool) -> None:
    import random

    import torch

    from harness import timing
    timing.pin(torch)
    if poison:  # as Runner._poison
        free, _ = torch.cuda.mem_get_info()
        torch.full((max(min(int(free * 0.25), 8 << 30) // 4, 1),), float("nan"), device="cuda")
        torch.cuda.synchronize()  # the block is freed at once, NaN-filled, into the allocator's cache

    rng = random.Random()
    out = {}
    for name, (n, k) in KERNELS.items():
        rep = timing.time_calls(relu_runner(torch, n, k), [rng.getrandbits(62) for _ in range(100)], warmup=5,
                                flush_l2=True, npos=0, hold_us=300.0)
        out[name] = statistics.median(rep["times_ms"]) * 1e3
    print(json.dumps(out))


def main(procs: int) -> None:
    got = {True: [], False: []}
    for i in range(procs):
        poison = i % 2 == 0
        p = subprocess.run([sys.executable, __file__, "--child", *(["--poison"] if poison else [])],
                           capture_output=True, text=True, timeout=300)
        if p.returncode:
            print(p.stderr[-3000:])
            raise SystemExit(1)
        got[poison].append(json.loads(p.stdout.strip().splitlines()[-1]))
    print("| kernel | poisoned: process medians (us) | not poisoned | poisoned / not (median of each) |")
    print("|---|---|---|---:|")
    for name in KERNELS:
        a = [r[name] for r in got[True]]
        b = [r[name] for r in got[False]]
        print(f"| {name} | {', '.join(f'{x:.3f}' for x in a)} | {', '.join(f'{x:.3f}' for x in b)} | "
              f"{statistics.median(a) / statistics.median(b):.4f} |")


if __name__ == "__main__":
    if "--child" in sys.argv:
        child("--poison" in sys.argv)
    else:
        main(int(sys.argv[sys.argv.index("--procs") + 1]) if "--procs" in sys.argv else 8)
