"""Where a load_inline CUDA extension's build spends its CPU (#41), and what a precompiled
<torch/extension.h> saves of it.

torch writes the extension's build files (its `_run_ninja_build` replaced, so nothing is built
there); each compile step of `build.ninja` is then run by hand and its CPU seconds (user + system,
the compiler's children included) read from getrusage: `main.o` (g++ on the generated main.cpp,
which includes <torch/extension.h>) and `cuda.cuda.o` (nvcc on the .cu), nvcc's phases from its own
`--time` report. With `--light`, cuda.cuda.o again with the light <torch/extension.h> nvcc gets in a
build's first try (harness/light_header.py). With `--pch`, a precompiled header is built from the main.o command (its extension
name left out, so any extension's main.cpp can use it) into `<dir>/torch/extension.h.gch/`, and
main.o compiled again with CPATH pointing there: gcc looks for `X.gch` in each include directory
before X, and falls back to the header where a PCH does not fit the flags (`-Winvalid-pch` says so).

    python bench/build_cost.py [--runs 2] [--pch] [--light] [--extra-cflags=-O3] [--arch 9.0]

Prints a table; writes nothing outside a temporary folder. Needs nvcc and torch's headers (a CPU
build of torch has them), not a GPU."""
from __future__ import annotations

import argparse
import csv
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
CPP = "torch::Tensor relu_cuda(torch::Tensor x);"
CU = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""


def build_commands(d: Path, extra_cflags: list[str], extra_cuda_cflags: list[str]) -> dict[str, list[str]]:
    from harness.pch import compile_commands
    return compile_commands(d, name="bench_relu", cpp_sources=CPP, cuda_sources=CU, functions=["relu_cuda"],
                            extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, with_cuda=True)


def cpu_run(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {p.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--pch", action="store_true", help="also main.o with a precompiled <torch/extension.h>")
    ap.add_argument("--light", action="store_true",
                    help="also cuda.cuda.o with the light <torch/extension.h> (harness/light_header.py)")
    ap.add_argument("--extra-cflags", default="", help="the extension's extra_cflags, space-separated")
    ap.add_argument("--extra-cuda-cflags", default="")
    ap.add_argument("--arch", default=os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0"))
    a = ap.parse_args()
    os.environ["TORCH_CUDA_ARCH_LIST"] = a.arch
    work = Path(tempfile.mkdtemp(prefix="build-cost-"))
    try:
        cmds = build_commands(work, a.extra_cflags.split(), a.extra_cuda_cflags.split())
        main_cmd, cuda_cmd = cmds["main.o"], cmds["cuda.cuda.o"]
        rows: dict[str, list[float]] = {"main.o": [], "cuda.cuda.o": []}
        phases: dict[str, list[float]] = {}
        for _ in range(a.runs):
            rows["main.o"].append(cpu_run(main_cmd, work)[0])
            csv_path = work / "nvcc-time.csv"
            csv_path.unlink(missing_ok=True)
            rows["cuda.cuda.o"].append(cpu_run(cuda_cmd + ["--time", str(csv_path)], work)[0])
            with open(csv_path) as fh:  # source, phase, inputs, output, arch, tool, metric, unit
                for rec in csv.reader(fh):
                    try:
                        ms = float(rec[6])
                    except (IndexError, ValueError):
                        continue  # the header
                    phases.setdefault(rec[1].strip(), []).append(ms / 1e3)
        if a.light:
            from harness.light_header import env as light_env
            rows["cuda.cuda.o with the light header"] = [
                cpu_run(cuda_cmd, work, {**os.environ, **light_env()})[0] for _ in range(a.runs)]
        if a.pch:
            import torch.utils.cpp_extension as ce
            from harness.pch import header_command
            include = Path(ce.include_paths()[0])
            gch = work / "pch" / "torch" / "extension.h.gch"
            gch.mkdir(parents=True)
            header = include / "torch" / "extension.h"
            rows["PCH build (once)"] = [cpu_run(header_command(main_cmd, header, gch / "default.gch"), work)[0]]
            env = {**os.environ, "CPATH": str(work / "pch")}
            rows["main.o with the PCH"] = []
            used = False
            for _ in range(a.runs):
                t, err = cpu_run(main_cmd + ["-H", "-Winvalid-pch"], work, env)
                rows["main.o with the PCH"].append(t)
                used = used or any(line.startswith("! ") and ".gch" in line for line in err.splitlines())
            rows["PCH size (GB)"] = [sum(f.stat().st_size for f in gch.iterdir()) / 1e9]
            print(f"PCH used by main.o: {used}")
        print(f"| step | CPU s (each run) | median |\n|---|---|---:|")
        for k, v in rows.items():
            print(f"| {k} | {', '.join(f'{x:.1f}' for x in v)} | {statistics.median(v):.1f} |")
        if phases:
            print("\nnvcc --time, wall seconds per phase (median of runs):\n| phase | s |\n|---|---:|")
            for k, v in phases.items():
                print(f"| {k} | {statistics.median(v):.2f} |")
        print(f"\nmain.o: {shlex.join(main_cmd)}\ncuda.cuda.o: {shlex.join(cuda_cmd)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
