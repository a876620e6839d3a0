"""Session 4 diagnostic (NVIDIA H200): the first torch.profiler session in a process costs ~5.7 s, and
afterwards every launch in that process costs ~27 us instead of ~7 us (profiler_launch_baseline.py).
Run: python bench/diag/profiler_launch_cost.py; results in bench/results/fidelity-NVIDIA_H200.md."""
import time, os, subprocess
t = time.perf_counter(); import torch; t_imp = time.perf_counter() - t
t = time.perf_counter(); x = torch.randn(1 << 20, device="cuda"); torch.cuda.synchronize(); t_ctx = time.perf_counter() - t
from torch.profiler import profile, ProfilerActivity
def prof():
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        y = (x * 2).relu(); torch.cuda.synchronize()
    t_in = time.perf_counter() - t
    names = sorted({e.name for e in p.events() if "CUDA" in str(getattr(e, "device_type", ""))})
    return round(t_in, 3), round(time.perf_counter() - t, 3), len(names)
p1, p2, p3 = prof(), prof(), prof()
def launch_us(n=2000):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): y = x.add_(1.0)
    torch.cuda.synchronize(); return round((time.perf_counter() - t) / n * 1e6, 2)
print(f"probe: import {t_imp:.2f}s ctx {t_ctx:.2f}s prof1 {p1} prof2 {p2} prof3 {p3} launch_us_after_prof {launch_us()}")
