"""Summarise fidelity.py stderr logs given as VARIANT=FILE: per kernel and variant, the 5 candidate and
reference medians, their spreads, and do_bench (read flush). Used for the launch-hold A/B (session 5)."""
import ast
import re
import sys

print(f"{'kernel':14} {'variant':8} {'spread':>7} {'refspr':>7} {'median':>8} {'do_bench':>8} {'vs db':>6}  s   runs_ms | ref_runs_ms")
for arg in sys.argv[1:]:
    variant, path = arg.split("=", 1)
    for line in open(path):
        m = re.match(r"^(\w+): (\{.*\})  \((\d+)s\)$", line.strip())
        if not m:
            continue
        r = ast.literal_eval(m.group(2))
        print(f"{r['kernel']:14} {variant:8} {r['spread_pct']:6.2f}% {r['ref_spread_pct']:6.2f}% {r['harness_ms']:8.4f} "
              f"{r['do_bench_read_ms']:8.4f} {r['vs_do_bench_pct']:+5.1f}% {m.group(3):>3} {r['runs_ms']} | {r['ref_runs_ms']}")
