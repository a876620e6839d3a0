"""Build the extensions of many solutions at once (all cores), into the harness's cache, so that a
later serial evaluation (the GPU test suite) finds every build warm. Usage:
    python bench/prebuild.py --cache-dir .cache/test-harness SOLUTION...
"""
from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.build import compile_solution, extensions_dir, source_file
from harness.build import builds_extensions
from harness.evaluation import resolve_device
from harness.config import load_config
from harness.solutions import load_solution


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("solutions", nargs="+")
    ap.add_argument("--cache-dir", default=None, help="default: the harness's (config.default_cache_dir)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    args = ap.parse_args()
    device = resolve_device(load_config())
    cache = Path(args.cache_dir or load_config().cache_dir).resolve()

    def build(path: str):
        sol = load_solution(path)
        if not sol.code or not builds_extensions(sol.code):
            return path, "skip", 0.0
        t0 = time.perf_counter()
        module = source_file(sol.code, sol.path, cache, sol.extracted)
        reply, failure, _ = compile_solution(module, extensions_dir(sol.code, device, cache), device, 600)
        status = failure or ("ok" if reply.ok else reply.category)
        return path, status, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        for path, status, secs in pool.map(build, args.solutions):
            print(f"{secs:7.1f}s  {status:14s} {path}")
    print(f"prebuilt {len(args.solutions)} solutions in {time.perf_counter() - t0:.1f}s on {args.jobs} workers")


if __name__ == "__main__":
    main()
