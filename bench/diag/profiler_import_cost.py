"""Session 4 diagnostic: does importing torch.profiler alone (the standby preload does) slow launches?
Run: python bench/diag/profiler_import_cost.py none|import"""
import sys, time, torch
if sys.argv[1] == "import":
    import torch.profiler  # noqa
x = torch.randn(1 << 12, device="cuda"); torch.cuda.synchronize()
def launch_us(n=3000):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): x.add_(1.0)
    torch.cuda.synchronize(); return round((time.perf_counter() - t) / n * 1e6, 2)
launch_us(); print(f"probe3 {sys.argv[1]}: launch_us", launch_us(), launch_us())
