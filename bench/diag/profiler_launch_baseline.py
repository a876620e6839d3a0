"""Session 4 diagnostic: launch cost in a process that never used the profiler (compare
profiler_launch_cost.py)."""
import time, torch
x = torch.randn(1 << 20, device="cuda"); torch.cuda.synchronize()
def launch_us(n=2000):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): y = x.add_(1.0)
    torch.cuda.synchronize(); return round((time.perf_counter() - t) / n * 1e6, 2)
launch_us(); print("probe2: launch_us_never_profiled", launch_us())
