"""Session 4 diagnostic: is the 2048^3 fp32 matmul time placement- or process-dependent? Eight fresh
allocations per process, three processes. Run: python bench/diag/matmul_placement.py 1"""
import sys, torch, statistics
torch.backends.cuda.matmul.allow_tf32 = False
n = 2048
flush = torch.zeros(256 << 20 >> 2, device="cuda"); sink = torch.empty((), device="cuda")
def med(a, b, k=40):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); ts = []
    for _ in range(k):
        torch.sum(flush, 0, out=sink); s.record(); torch.mm(a, b); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
res = []
keep = []
for i, sp in enumerate([0, 37, 0, 91, 13, 160, 0, 55]):
    spacer = torch.empty(sp << 20, dtype=torch.uint8, device="cuda")
    a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
    med(a, b, 5); res.append(round(med(a, b), 4)); keep.append((spacer, a, b))  # keep: new pages each time
print(f"proc {sys.argv[1]}: per-placement medians {res} spread {max(res)/min(res)-1:.2%}")
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as p:
    torch.mm(keep[0][1], keep[0][2]); torch.cuda.synchronize()
print("  kernel:", sorted({e.name for e in p.events() if "CUDA" in str(e.device_type)})[:2])
