"""Where the kernel listing's seconds go (run on a GPU machine): one fresh process times an empty
profiler session (CUPTI's start-up, which evaluation.py runs outside the device slot's gate) and then
the listing's own session around one forward, twice. Prints one JSON line.

Usage: python bench/diag/profiler_start.py
"""
import json
import time

t0 = time.perf_counter()
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

x = torch.randn(1 << 20, device="cuda")
torch.relu(x)
torch.cuda.synchronize()
out = {"import_and_cuda_init_s": time.perf_counter() - t0}


def session(tag: str, work: bool) -> None:
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out[f"{tag}_enter_s"] = time.perf_counter() - t
        if work:
            torch.relu(x)
            torch.cuda.synchronize()
        t_exit = time.perf_counter()
    out[f"{tag}_exit_s"] = time.perf_counter() - t_exit
    t_ev = time.perf_counter()
    names = {e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))}
    out[f"{tag}_events_s"] = time.perf_counter() - t_ev
    out[f"{tag}_total_s"] = time.perf_counter() - t
    out[f"{tag}_kernels"] = len(names)


session("start", work=False)
session("listing", work=True)
session("again", work=True)
print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))
