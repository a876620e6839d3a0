"""The launch-bound fixture (24 tiny kernels, one the solution's own) against its reference at several
timing.launch_hold_us values: is a hold shorter than the host's enqueue of the forward what moves the
speedup (a partial leak of launch latency on one side)? Session 5, after the GPU test
test_an_identical_launch_bound_solution_times_like_its_reference read 1.31x with a 200 us hold.
Usage: python bench/diag/launch_hold_sweep.py [HOLD ...]  (a GPU; holds in us or "auto", by default
auto 0 100 200 400 1000 3000)"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from harness.config import load_config  # noqa: E402
from harness.evaluation import evaluate  # noqa: E402

holds = [h if h == "auto" else float(h) for h in (sys.argv[1:] or ["auto", "0", "100", "200", "400", "1000", "3000"])]
print(f"{'hold':>5} {'hold_us':>8} {'status':>8} {'speedup':>8} {'cand_ms':>9} {'ref_ms':>9} {'cand_host_ms':>12} {'ref_host_ms':>11} {'cand_enq_ms':>11} {'ref_enq_ms':>10} {'leaked c/r':>10}")
for h in holds:
    cfg = load_config(None, {"device": "cuda", "timing.compile_baseline": "off", "timing.launch_hold_us": h,
                             "cache_dir": str(ROOT / ".cache" / "test-harness")})
    r = evaluate(ROOT / "tests/fixtures/gpu/honest_launch_bound_ext.py", ROOT / "tests/problems/launch_chain.py", cfg)
    tm = r.timing_method
    print(f"{h!s:>5} {tm.get('launch_hold_us') or 0:>8.0f} {r.status.value:>8} {r.speedup or 0:>8.3f} {r.runtime_ms or 0:>9.4f} {r.ref_runtime_ms or 0:>9.4f} "
          f"{tm.get('cand_host_ms_median', '-')!s:>12} {tm.get('ref_host_ms_median', '-')!s:>11} "
          f"{tm.get('cand_enqueue_ms_median', '-')!s:>11} {tm.get('ref_enqueue_ms_median', '-')!s:>10} "
          f"{tm.get('cand_launch_leaked_calls')!s:>5}/{tm.get('ref_launch_leaked_calls')!s:<4} {r.flags}", flush=True)
