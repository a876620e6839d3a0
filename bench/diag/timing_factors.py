"""Session 4 diagnostic: which part of the harness timing loop (fresh inputs, persisting-L2 reset, NVML
read per call) moves a 2048^3 fp32 matmul? Run from the repo root: python bench/diag/timing_factors.py"""
import statistics, torch, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from harness.timing.hold import persisting_l2_reset
from harness.timing.monitor import GpuMonitor
torch.backends.cuda.matmul.allow_tf32 = False
n = 2048
flush = torch.zeros(256 << 20 >> 2, device="cuda"); sink = torch.empty((), device="cuda")
reset = persisting_l2_reset(); mon = GpuMonitor()
a0 = torch.randn(n, n, device="cuda"); b0 = torch.randn(n, n, device="cuda")
def run(fresh, rst, nvml, k=40):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); ts = []
    for i in range(k):
        if fresh:
            torch.manual_seed(i); a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
        else:
            a, b = a0, b0
        torch.cuda.synchronize()
        if rst: reset()
        torch.sum(flush, 0, out=sink); s.record(); torch.mm(a, b); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        if nvml: mon.sm()
    return round(statistics.median(ts), 4)
V = {"base": (0, 0, 0), "fresh": (1, 0, 0), "reset": (0, 1, 0), "nvml": (0, 0, 1), "all": (1, 1, 1)}
for v in V.values(): run(*v, k=5)
out = {k: [] for k in V}
for rep in range(3):
    for k, v in V.items(): out[k].append(run(*v))
for k, xs in out.items(): print(f"{k:6s} {xs}")
