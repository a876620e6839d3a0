"""Throughput of `harness batch`: how close a run comes to the machine's floor.

Builds a folder of solutions over three problems (tests/problems: relu_add, softmax_wide,
linear_relu), by three labels: honest PyTorch ones, honest load_inline extensions (CUDA on a GPU, C++
on the CPU), wrong ones, build errors, a syntax error, a raw response without code, a hang, a crash
and an exception. Then:

  1. cold: `harness batch` into a new run directory with an empty build cache;
  2. warm: the same folder into another new run directory, builds cached.

For the cold run the floor is max(compile CPU-seconds / cores, device-seconds / device slots):
compile CPU-seconds are the build children's user+system time (compiler included, from wait4), and
device-seconds the records' phases outside the build (load, trials, timing, reference start). A
pipeline with no barriers and no idle device runs close to it. (On the CPU the device slot's work
also takes CPU; the table's floor does not count that.) The warm run is reported as a fraction of the
cold one. Verdicts are checked, in every run, against what each solution was written to get.

`--extensions` makes every honest or wrong solution an extension of its own (32 builds of 39), as a
model's generations mostly are; the default mix has 15 builds and 24 PyTorch-only solutions.

Usage: python bench/throughput.py [--device cpu|cuda] [--small] [--extensions] [--gpus 0,1] [--compile-workers N]
       [--backend local|ray]
Results: a table on stdout (last lines) and bench/out/throughput-<device>.md (copied by hand,
with its context, into bench/results/throughput-<device>.md).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "tests" / "problems"

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
EXT_HEAD = HEAD + "from torch.utils.cpp_extension import load_inline\n"


def torch_solution(forward: str, args: str = "a, b", init: str = "") -> str:
    init_block = f"    def __init__(self, in_features, out_features):\n        super().__init__()\n{init}" if init else ""
    return HEAD + f"\n\nclass ModelNew(nn.Module):\n{init_block}    def forward(self, {args}):\n        return {forward}\n"


# --------------------------------------------------------------------------------------------------
# Extensions. CPU: C++ loops. CUDA: simple kernels on the current stream.

CPP_RELU_ADD = r"""
#include <torch/extension.h>
#include <algorithm>
torch::Tensor {fn}(torch::Tensor a, torch::Tensor b) {{
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < ac.numel(); ++i) {{ float v = pa[i] {op} pb[i]; po[i] = {relu}; }}
    return out;
}}
"""

CUDA_RELU_ADD = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void {fn}_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                            int64_t n) {{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {{
        float v = a[i] {op} b[i];
        out[i] = {relu};
    }}
}}
torch::Tensor {fn}(torch::Tensor a, torch::Tensor b) {{
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::empty_like(ac);
    int64_t n = ac.numel();
    if (n == 0) return out;
    const int threads = {threads};
    int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
    {fn}_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

CPP_SOFTMAX = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
torch::Tensor bt_softmax_rows(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float* px = xc.data_ptr<float>(); float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = px + r * cols; float* yr = py + r * cols;
        float m = xr[0];
        for (int64_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) { float e = std::exp(xr[j] - m); yr[j] = e; s += e; }
        const float inv = (float)(1.0 / s);
        for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
    }
    return y;
}
"""

CUDA_SOFTMAX = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cfloat>
// one block per row; the block reduces the row's max, then its sum of exponentials, in shared memory
__global__ void bt_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    extern __shared__ float sh[];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    const int t = threadIdx.x;
    float m = -FLT_MAX;
    for (int64_t j = t; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    sh[t] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    float sum = 0.f;
    for (int64_t j = t; j < cols; j += blockDim.x) sum += expf(xr[j] - m);
    sh[t] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    const float inv = 1.f / sh[0];
    for (int64_t j = t; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
}
torch::Tensor bt_softmax_rows(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    if (rows == 0 || cols == 0) return y;
    const int threads = 256;  // a power of two, for the tree reductions
    bt_softmax_kernel<<<(unsigned)rows, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    return y;
}
"""

CPP_BIAS_RELU = r"""
#include <torch/extension.h>
torch::Tensor bt_bias_relu(torch::Tensor y, torch::Tensor b) {
    auto yc = y.contiguous(), bc = b.contiguous();
    const int64_t n = yc.numel(), cols = bc.numel();
    float* py = yc.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) { float v = py[i] + pb[i % cols]; py[i] = v > 0.f ? v : 0.f; }
    return yc;
}
"""

CUDA_BIAS_RELU = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void bt_bias_relu_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t n, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = y[i] + b[i % cols]; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor bt_bias_relu(torch::Tensor y, torch::Tensor b) {
    auto yc = y.contiguous(), bc = b.contiguous();
    const int64_t n = yc.numel(), cols = bc.numel();
    if (n == 0) return yc;
    const int threads = 256;
    bt_bias_relu_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        yc.data_ptr<float>(), bc.data_ptr<float>(), n, cols);
    return yc;
}
"""

CPP_BROKEN = r"""
#include <torch/extension.h>
torch::Tensor bt_broken(torch::Tensor a, torch::Tensor b) {
    int not_a_tensor = a;   // no conversion from Tensor to int
    return b;
}
"""

CUDA_BROKEN = r"""
#include <torch/extension.h>
__global__ void bt_broken_kernel(float* x) { x[0] = undeclared_value; }
torch::Tensor bt_broken(torch::Tensor a, torch::Tensor b) {
    bt_broken_kernel<<<1, 1>>>(a.data_ptr<float>());
    return b;
}
"""


def ext_solution(device: str, name: str, fn: str, src_cpu: str, src_cuda: str, decl: str, model: str) -> str:
    if device == "cuda":
        load = (f"ext = load_inline(name={name!r}, cpp_sources={decl!r}, cuda_sources=SRC, functions=[{fn!r}])\n")
        src = src_cuda
    else:
        load = f"ext = load_inline(name={name!r}, cpp_sources=SRC, functions=[{fn!r}])\n"
        src = src_cpu
    return EXT_HEAD + f"\nSRC = r'''{src}'''\n" + load + "\n\n" + textwrap.dedent(model)


def relu_add_ext(device: str, name: str, op: str = "+", relu: str = "v > 0.f ? v : 0.f", threads: int = 256) -> str:
    fn = name
    fmt = dict(fn=fn, op=op, relu=relu, threads=threads)
    return ext_solution(device, name, fn, CPP_RELU_ADD.format(**fmt), CUDA_RELU_ADD.format(**fmt),
                        f"torch::Tensor {fn}(torch::Tensor a, torch::Tensor b);",
                        f"class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return ext.{fn}(a, b)\n")


def _variant(src_cpu: str, src_cuda: str, base: str, name: str, threads: int, wrong: Optional[tuple] = None):
    """One more sample of a kernel: renamed from `base`, another block size, and made wrong by
    `wrong` = (cuda line, its replacement, C++ line, its replacement)."""
    cuda = src_cuda.replace(base, name).replace("const int threads = 256", f"const int threads = {threads}")
    cpu = src_cpu.replace(base, name) + f"// variant {threads}\n"
    if wrong:
        cuda, cpu = cuda.replace(wrong[0], wrong[1]), cpu.replace(wrong[2], wrong[3])
    return cpu, cuda


def softmax_ext(device: str, name: str, threads: int = 256, normalize: bool = True) -> str:
    cpu, cuda = _variant(CPP_SOFTMAX, CUDA_SOFTMAX, "bt_softmax", name, threads,
                         None if normalize else ("const float inv = 1.f / sh[0];", "const float inv = 1.f;",
                                                 "const float inv = (float)(1.0 / s);", "const float inv = 1.0f;"))
    return ext_solution(device, name, f"{name}_rows", cpu, cuda, f"torch::Tensor {name}_rows(torch::Tensor x);",
                        f"class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.{name}_rows(x)\n")


def bias_relu_ext(device: str, name: str, threads: int = 256, relu: bool = True) -> str:
    cpu, cuda = _variant(CPP_BIAS_RELU, CUDA_BIAS_RELU, "bt_bias_relu", name, threads,
                         None if relu else ("y[i] = v > 0.f ? v : 0.f;", "y[i] = v;",
                                            "py[i] = v > 0.f ? v : 0.f;", "py[i] = v;"))
    return ext_solution(device, name, name, cpu, cuda, f"torch::Tensor {name}(torch::Tensor y, torch::Tensor b);",
                        "class ModelNew(nn.Module):\n    def __init__(self, in_features, out_features):\n"
                        "        super().__init__()\n        self.linear = nn.Linear(in_features, out_features)\n\n"
                        "    def forward(self, x):\n"
                        f"        return ext.{name}(torch.matmul(x, self.linear.weight.t()), self.linear.bias)\n")


def catalog(device: str) -> list[dict]:
    """(label, problem, file name, expected status, code, builds an extension, in --small)."""
    S = []

    def add(label, problem, name, expect, code, ext=False, small=False):
        S.append(dict(label=label, problem=problem, name=name, expect=expect, code=code, ext=ext, small=small))

    # relu_add: 18
    for i, (lab, body) in enumerate([("modelA", "torch.relu(a + b)"), ("modelB", "(a + b).clamp_min(0)"),
                                     ("modelC", "torch.clamp(a + b, min=0)"), ("modelA", "F.relu(a.add(b))"),
                                     ("modelB", "torch.maximum(a + b, torch.zeros_like(a))")]):
        add(lab, "relu_add", f"torch_{i}.py", "passed", torch_solution(body), small=i < 2)
    add("modelA", "relu_add", "ext_grid.py", "passed", relu_add_ext(device, "bt_relu_add_grid"), ext=True, small=True)
    add("modelB", "relu_add", "ext_max.py", "passed",
        relu_add_ext(device, "bt_relu_add_max", relu="std::max(v, 0.f)" if device == "cpu" else "fmaxf(v, 0.f)",
                     threads=512), ext=True)
    add("modelC", "relu_add", "ext_wrong.py", "incorrect", relu_add_ext(device, "bt_relu_sub", op="-"), ext=True)
    # generations are mostly extensions: more of them, as a model's samples for one problem differ
    add("modelA", "relu_add", "ext_t128.py", "passed", relu_add_ext(device, "bt_relu_add_t128", threads=128), ext=True)
    add("modelC", "relu_add", "ext_t1024.py", "passed", relu_add_ext(device, "bt_relu_add_t1024", threads=1024), ext=True)
    add("modelB", "relu_add", "ext_norelu.py", "incorrect", relu_add_ext(device, "bt_add_norelu", relu="v"), ext=True)
    add("modelC", "relu_add", "ext_broken.py", "compile_error",
        ext_solution(device, "bt_broken", "bt_broken", CPP_BROKEN, CUDA_BROKEN,
                     "torch::Tensor bt_broken(torch::Tensor a, torch::Tensor b);",
                     "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return ext.bt_broken(a, b)\n"),
        ext=True, small=True)
    add("modelA", "relu_add", "wrong_sub.py", "incorrect", torch_solution("torch.relu(a - b)"), small=True)
    add("modelB", "relu_add", "hang.py", "timeout", HEAD + "\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        while True:\n            pass\n", small=True)
    add("modelC", "relu_add", "segfault.py", "runtime_error", HEAD + "import ctypes\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, a, b):\n        ctypes.string_at(0)\n        return a + b\n", small=True)
    add("modelA", "relu_add", "raises.py", "runtime_error", HEAD + "\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, a, b):\n        raise RuntimeError('not implemented')\n")
    add("modelB", "relu_add", "syntax.py", "compile_error", HEAD + "\n\nclass ModelNew(nn.Module:\n    pass\n")
    add("modelC", "relu_add", "response.md", "no_code", "I would write a fused kernel here, but did not.\n", small=True)

    # softmax_wide: 11
    for i, (lab, body) in enumerate([("modelA", "torch.softmax(x, dim=1)"), ("modelB", "F.softmax(x, dim=-1)"),
                                     ("modelC", "torch.exp(x - x.amax(1, keepdim=True)) / "
                                                "torch.exp(x - x.amax(1, keepdim=True)).sum(1, keepdim=True)"),
                                     ("modelA", "torch.log_softmax(x, dim=1).exp()")]):
        add(lab, "softmax_wide", f"torch_{i}.py", "passed", torch_solution(body, "x"), small=i == 0)
    add("modelB", "softmax_wide", "ext_rows.py", "passed", softmax_ext(device, "bt_softmax"), ext=True)
    add("modelA", "softmax_wide", "ext_t128.py", "passed", softmax_ext(device, "bt_sm128", 128), ext=True)
    add("modelC", "softmax_wide", "ext_t512.py", "passed", softmax_ext(device, "bt_sm512", 512), ext=True)
    add("modelB", "softmax_wide", "ext_unnormalized.py", "incorrect",
        softmax_ext(device, "bt_sm_nonorm", normalize=False), ext=True)
    add("modelC", "softmax_wide", "zeros.py", "incorrect", torch_solution("torch.zeros_like(x)", "x"), small=True)
    add("modelA", "softmax_wide", "unnormalized.py", "incorrect", torch_solution("torch.exp(x)", "x"))
    add("modelB", "softmax_wide", "import_error.py", "runtime_error",
        HEAD + "import no_such_module_anywhere\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
               "        return x\n")

    # linear_relu: 10
    lin = "        self.linear = nn.Linear(in_features, out_features)\n"
    for i, (lab, body) in enumerate([("modelA", "F.relu(F.linear(x, self.linear.weight, self.linear.bias))"),
                                     ("modelB", "torch.addmm(self.linear.bias, x, self.linear.weight.t()).relu()"),
                                     ("modelC", "torch.clamp_min(x @ self.linear.weight.t() + self.linear.bias, 0)"),
                                     ("modelA", "torch.relu(self.linear(x))")]):
        add(lab, "linear_relu", f"torch_{i}.py", "passed", torch_solution(body, "x", lin), small=i == 0)
    add("modelB", "linear_relu", "ext_epilogue.py", "passed", bias_relu_ext(device, "bt_bias_relu"), ext=True)
    add("modelA", "linear_relu", "ext_t128.py", "passed", bias_relu_ext(device, "bt_bias_relu_t128", 128), ext=True)
    add("modelC", "linear_relu", "ext_t512.py", "passed", bias_relu_ext(device, "bt_bias_relu_t512", 512), ext=True)
    add("modelB", "linear_relu", "ext_norelu.py", "incorrect", bias_relu_ext(device, "bt_bias_norelu", relu=False),
        ext=True)
    add("modelC", "linear_relu", "no_bias.py", "incorrect", torch_solution("F.relu(F.linear(x, self.linear.weight))",
                                                                          "x", lin), small=True)
    add("modelA", "linear_relu", "wrong_init.py", "interface_error", torch_solution("x", "x", "        pass\n")
        .replace("def __init__(self, in_features, out_features)", "def __init__(self)"))
    return S


def all_extensions(device: str, sols: list[dict]) -> list[dict]:
    """--extensions: the catalog as a model's generations mostly are, every honest or wrong solution a
    load_inline extension of its own (another kernel name and block size each, so another build);
    what fails before or without a build (syntax, no code, the hang, the crash, the exception, the
    import and interface errors) stays as it is."""
    swap = {
        ("relu_add", "wrong_sub.py"): ("ext_sub_t64.py", relu_add_ext(device, "bt_relu_sub_t64", op="-", threads=64)),
        ("softmax_wide", "zeros.py"): ("ext_unnormalized_t64.py", softmax_ext(device, "bt_sm_nonorm64", 64, normalize=False)),
        ("softmax_wide", "unnormalized.py"): ("ext_unnormalized_t1024.py",
                                              softmax_ext(device, "bt_sm_nonorm1024", 1024, normalize=False)),
        ("linear_relu", "no_bias.py"): ("ext_norelu_t1024.py", bias_relu_ext(device, "bt_bias_norelu1024", 1024, relu=False)),
    }
    for i, threads in enumerate((64, 192, 384, 768, 896)):
        swap[("relu_add", f"torch_{i}.py")] = (f"ext_v{i}.py", relu_add_ext(device, f"bt_relu_add_v{i}", threads=threads))
    for i, threads in enumerate((64, 1024, 32, 256)):  # powers of two: tree reductions
        swap[("softmax_wide", f"torch_{i}.py")] = (f"ext_v{i}.py", softmax_ext(device, f"bt_sm_v{i}", threads))
    for i, threads in enumerate((64, 192, 384, 1024)):
        swap[("linear_relu", f"torch_{i}.py")] = (f"ext_v{i}.py", bias_relu_ext(device, f"bt_bias_relu_v{i}", threads))
    out = []
    for s in sols:
        name, code = swap.get((s["problem"], s["name"]), (None, None))
        out.append(dict(s, name=name, code=code, ext=True) if name else s)
    return out


# --------------------------------------------------------------------------------------------------

def write_tree(root: Path, sols: list[dict]) -> None:
    for s in sols:
        p = root / s["label"] / s["problem"] / s["name"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(s["code"])


def write_config(path: Path, cache: Path, run_s: float, compile_baseline: bool, lanes: Optional[int] = None,
                 batch_set: Optional[dict[str, str]] = None) -> None:
    """The default config, but for a fresh build cache, the hang's cost (run_s) and, unless asked
    for, no torch.compile baseline (it measures the pipeline, not inductor). `lanes`: evaluations in
    flight per device slot, GPU and CPU alike (default: the config's); `batch_set`: other [batch]
    settings, as TOML values."""
    # batch.KEY is the same as KEY: both name a [batch] setting
    batch_set = {(k[len("batch."):] if k.startswith("batch.") else k): v for k, v in (batch_set or {}).items()}
    batch = "[batch]\n" + (f"concurrent_evaluations = {lanes}\ncpu_concurrent_evaluations = {lanes}\n" if lanes else "")
    batch += "".join(f"{k} = {v}\n" for k, v in batch_set.items() if "." not in k)
    # SECTION.KEY: a setting of another section, e.g. correctness.kernel_list='"profiler"'
    # (a [timing] one joins the table written here: TOML has no second [timing])
    other = "".join(f"[{k.split('.')[0]}]\n{k.split('.', 1)[1]} = {v}\n" for k, v in batch_set.items()
                    if "." in k and not k.startswith("timing."))
    timing = "".join(f"{k.split('.', 1)[1]} = {v}\n" for k, v in batch_set.items() if k.startswith("timing."))
    path.write_text(f'cache_dir = "{cache}"\n[timeouts]\ncompile_s = 900\nload_s = 120\nrun_s = {run_s}\n'
                    "problem_s = 300\n[timing]\n"
                    f'compile_baseline = "{"auto" if compile_baseline else "off"}"\n' + timing + batch + other)


def run_batch(subs: Path, run: Path, cfg: Path, args) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "harness.cli", "batch", str(subs), "--problems", str(PROBLEMS), "--out", str(run),
           "--config", str(cfg), "--device", args.device, "--json"]
    if args.gpus:
        cmd += ["--gpus", args.gpus]
    if args.compile_workers:
        cmd += ["--compile-workers", str(args.compile_workers)]
    if args.backend != "local":
        cmd += ["--backend", args.backend]
    t0 = time.perf_counter()
    with open(run.parent / f"{run.name}.stderr.log", "w") as err, open(run.parent / f"{run.name}.stdout.json", "w") as out:
        rc = subprocess.call(cmd, cwd=REPO, stdout=out, stderr=err)
    return time.perf_counter() - t0, rc


def analyse(run: Path, wall: float, cores: int) -> dict:
    recs = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    device_s = sum(max(0.0, r["phases"]["total_s"] - r["phases"]["compile_s"] - r["phases"]["extract_s"]
                       - (r["phases"].get("wait_s") or 0.0)) for r in recs)
    timed_s = sum(r["phases"].get("timing_s") or 0.0 for r in recs)
    slots = max(1, len(summary["device_busy_s"]))
    conf = json.loads((run / "config.json").read_text())["batch"]
    on_gpu = any(k.startswith("cuda") for k in summary["device_busy_s"])
    lanes = max(1, conf["concurrent_evaluations"] if on_gpu else conf["cpu_concurrent_evaluations"])
    compile_cpu = summary["compile_cpu_s"]
    # a slot runs `lanes` evaluations at once, but timing alone: it needs at least the timing phases
    # plus the rest of the device work spread over the lanes
    dev_floor = (timed_s + (device_s - timed_s) / lanes) / slots
    floor = max(compile_cpu / cores, dev_floor)
    # where a device slot's time goes, per evaluated solution (records that reached the candidate)
    evald = [r["phases"] for r in recs if r["phases"].get("load_s")]
    phases = {k: sum(p.get(k) or 0.0 for p in evald) / max(1, len(evald))
              for k in ("load_s", "correctness_s", "trials_s", "reference_s", "judge_s", "timing_s", "profile_s", "wait_s")}
    # the kernel listings: readying CUPTI (or the profiler's start-up) in the candidate's process
    phases["listed"] = sum(1 for p in evald if p.get("profiler_start_s") is not None)
    phases["profiler_start_s"] = sum(p.get("profiler_start_s") or 0.0 for p in evald) / max(1, phases["listed"])
    return {"phases": phases, "evaluated": len(evald), "wall_s": wall, "timeline": timeline(run, wall), "compile_cpu_s": compile_cpu,
            "compiles": summary["compiles"], "device_s": device_s, "timed_s": timed_s, "lanes": lanes,
            "dev_floor_s": dev_floor, "occupied_s": sum(summary.get("device_occupied_s", {}).values()),
            "slot_busy_s": sum(summary["device_busy_s"].values()), "slots": slots, "floor_s": floor,
            "records": len(recs), "statuses": Counter(r["status"] for r in recs), "recs": recs,
            "references": sum(summary["references_started"].values())}


def timeline(run: Path, wall: float) -> dict:
    """What bounds the wall time, from the run's events (seconds since the pipeline's start, which
    comes `setup_s` after the batch's): when the last real build ended, when evaluations started and ended, how long a built solution waited for
    the slot, and how many evaluations were in flight on average."""
    ev = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    comp = {e["index"]: e for e in ev if e["event"] == "compiled"}
    evals = [e for e in ev if e["event"] == "evaluated" and e.get("t_start") is not None]
    if not evals:
        return {}
    builds = [e["t"] for e in comp.values() if e.get("cpu_s")]
    first, last = min(e["t_start"] for e in evals), max(e["t"] for e in evals)
    waits = [e["t_start"] - comp[e["index"]]["t"] for e in evals if e["index"] in comp]
    summ = json.loads((run / "summary.json").read_text())
    setup = summ.get("setup_s", 0.0)
    end = max(last, max((e["t"] for e in comp.values()), default=0.0))
    return {"setup_s": setup, "first_eval_s": first, "builds_end_s": max(builds, default=0.0), "last_eval_s": last,
            "outside_s": max(0.0, wall - setup - end),  # the interpreter's start, the leaderboard, shutting down
            "shutdown_s": summ.get("shutdown_s"),  # of outside_s: closing the slots' processes
            "wait_ready_s": statistics.mean(waits) if waits else 0.0,
            "in_flight": sum(e["t"] - e["t_start"] for e in evals) / max(1e-9, last - first),
            "cached_builds": sum(bool(e.get("cached")) for e in comp.values()),
            # timing phases that moved builds off the timing CPU they had borrowed (cpus.Lender), and
            # the mean milliseconds that took
            "reclaims": summ.get("timing_cpu_reclaims"),
            # candidate phases that gave up their lane for running long (the hang, slow trials)
            "overdue": sum((summ.get("overdue_phases") or {}).values()),
            "reclaim_ms": 1e3 * (summ.get("timing_cpu_reclaim_s") or 0.0) / max(1, summ.get("timing_cpu_reclaims") or 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if _has_cuda() else "cpu")
    ap.add_argument("--small", action="store_true", help="12 solutions, 2 extension builds (slow CPUs)")
    ap.add_argument("--extensions", action="store_true",
                    help="every honest or wrong solution an extension build of its own, as generations mostly are")
    ap.add_argument("--gpus", default=None)
    ap.add_argument("--compile-workers", type=int, default=None)
    ap.add_argument("--backend", choices=["local", "ray"], default="local",
                    help="harness batch --backend: ray runs the builds and slots on a local Ray (its overhead)")
    ap.add_argument("--run-timeout", type=float, default=20.0, help="timeouts.run_s (what the hang costs)")
    ap.add_argument("--compile-baseline", action="store_true", help="also time torch.compile(Model) (config auto)")
    ap.add_argument("--out", default=None, help="work folder (default bench/out/throughput-<device>-<time>)")
    ap.add_argument("--lanes", type=int, default=None, help="evaluations in flight per device slot (default: config)")
    ap.add_argument("--compare-lanes", type=int, default=None,
                    help="a third run, warm, with this many evaluations per slot (the effect of sharing a slot)")
    ap.add_argument("--compare", action="append", default=[], metavar="KEY=VALUE",
                    help="a further warm run with this [batch] setting changed, e.g. prime_standbys=false, or "
                         "SECTION.KEY=VALUE for another section's "
                         "(repeatable: one run each, alternating with the default's warm runs)")
    ap.add_argument("--cold-only", action="store_true",
                    help="only the cold run (A/B of a [batch] setting's effect on builds, with --set)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a [batch] setting for every run, cold included (an A/B of the cold run across invocations)")
    args = ap.parse_args()
    every = dict(kv.split("=", 1) for kv in args.set)

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = Path(args.out or REPO / "bench" / "out" / f"throughput-{args.device}-{stamp}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    sols = [s for s in catalog(args.device) if s["small"] or not args.small]
    if args.extensions:
        sols = all_extensions(args.device, sols)
    write_tree(work / "subs", sols)
    cfg = work / "bench.toml"
    write_config(cfg, work / "cache", args.run_timeout, args.compile_baseline, args.lanes, every)  # a fresh, empty build cache
    runs = [("cold", cfg)] if args.cold_only else [("cold", cfg), ("warm", cfg)]
    if args.compare_lanes:
        cfg2 = work / f"bench-lanes{args.compare_lanes}.toml"
        write_config(cfg2, work / "cache", args.run_timeout, args.compile_baseline, args.compare_lanes, every)
        runs.append((f"warm{args.compare_lanes}", cfg2))
    for i, kv in enumerate(args.compare):
        key, val = kv.split("=", 1)
        cfg3 = work / f"bench-{key}-{val}.toml"  # two values of one key: two files
        write_config(cfg3, work / "cache", args.run_timeout, args.compile_baseline, args.lanes, {**every, key: val})
        runs.append((f"warm-{key}={val}", cfg3))
        if i < len(args.compare) - 1:  # the default again in between: machine drift shows as its spread
            runs.append((f"warm{i + 2}", cfg))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n_ext = sum(s["ext"] for s in sols)
    problems = sorted({s["problem"] for s in sols})
    print(f"throughput: {len(sols)} solutions over {len(problems)} problems ({n_ext} extension builds), "
          f"device {args.device}, {cores} cores; work folder {work}", file=sys.stderr)

    results = {}
    for name, conf in runs:
        wall, rc = run_batch(work / "subs", work / name, conf, args)
        if rc != 0:
            print(f"harness batch failed (exit {rc}); see {work / (name + '.stderr.log')}", file=sys.stderr)
            return 1
        results[name] = analyse(work / name, wall, cores)
        print(f"  {name}: {wall:.1f} s", file=sys.stderr)

    expect = {(s["label"], s["problem"], s["name"]): s["expect"] for s in sols}
    wrong = []
    for name, res in results.items():  # every run: a warm run shares its slot as much as a cold one
        for r in res["recs"]:
            key = tuple(Path(r["solution"]).parts[-3:])
            if expect.get(key) != r["status"]:
                wrong.append(f"{name} {'/'.join(key)}: expected {expect.get(key)}, got {r['status']}"
                             + (f" ({(r.get('error') or '').splitlines()[0][:160]})" if r.get("error") else ""))
    gpu = _gpu_name(work / "cold") if args.device == "cuda" else platform.processor() or platform.machine()
    table = render(results)
    md = report_md(args, sols, problems, n_ext, cores, gpu, results, table, wrong, work)
    # bench/out (ignored): bench/results holds the curated history, each run's table added by hand
    out = REPO / "bench" / "out" / f"throughput-{args.device}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    if wrong:
        print(f"{len(wrong)} unexpected verdict(s):\n  " + "\n  ".join(wrong), file=sys.stderr)
    print(f"written {out.relative_to(REPO)}", file=sys.stderr)
    print(f"{len(sols)} solutions, {len(problems)} problems, {n_ext} builds; {args.device} ({gpu}), {cores} cores, "
          f"{results['cold']['slots']} device slot(s); verdicts as written: "
          f"{len(sols) * len(results) - len(wrong)}/{len(sols) * len(results)} over {len(results)} runs")
    print(table)
    for name, r in results.items():
        print(f"{name}: per evaluated solution ({r['evaluated']}): " +
              ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))
        if r["timeline"]:
            print(f"{name}: timeline (s from the pipeline's start): " +
                  ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r["timeline"].items()))
    return 0


def render(results: dict) -> str:
    head = (f"{'run':<6} {'lanes':>5} {'wall_s':>8} {'compile_cpu_s':>14} {'device_s':>9} {'timed_s':>8} {'occupied_s':>10} "
            f"{'floor_s':>8} {'wall/floor':>10} {'vs_cold':>8}")
    lines = [head]
    cold = results["cold"]["wall_s"]
    for name, r in results.items():
        lines.append(f"{name:<6} {r['lanes']:>5} {r['wall_s']:>8.1f} {r['compile_cpu_s']:>14.1f} {r['device_s']:>9.1f} "
                     f"{r['timed_s']:>8.1f} {r['occupied_s']:>10.1f} "
                     f"{r['floor_s']:>8.1f} {r['wall_s'] / r['floor_s']:>10.2f} "
                     f"{'-' if name == 'cold' else format(r['wall_s'] / cold, '.2f'):>8}")
    return "\n".join(lines)


def report_md(args, sols, problems, n_ext, cores, gpu, results, table, wrong, work) -> str:
    cold = results["cold"]
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(cold["statuses"].items()))
    return (f"# harness batch throughput ({args.device})\n\n"
            f"Generated by `python bench/throughput.py {' '.join(sys.argv[1:])}` "
            f"on {dt.date.today()}: {len(sols)} solutions over {len(problems)} problems ({', '.join(problems)}), "
            f"{n_ext} of them with load_inline extensions; {args.device} ({gpu}), {cores} cores, "
            f"{cold['slots']} device slot(s), compile workers: {args.compile_workers or 'the default (a build per core)'}.\n\n"
            f"```\n{table}\n```\n\n"
            "- `compile_cpu_s`: user+system CPU seconds of the build children (compiler included); `device_s`: "
            "the records' phases outside the build (candidate load, trials, timing, reference start, kernel "
            "listing), summed, without waits at the slot's gate; `timed_s`: their timing phases alone, which have the device to themselves; "
            "`occupied_s`: time the device slots had at least one evaluation in flight.\n"
            f"- `floor_s` = max(compile_cpu_s / cores, (timed_s + (device_s - timed_s) / lanes) / device slots), "
            f"lanes = evaluations in flight per slot ({cold['lanes']} here): untimed phases can overlap, timing "
            "cannot. `wall/floor` near 1 means builds and evaluations overlapped with no idle device. On the CPU, "
            "evaluations use a core of their own, which this floor does not count.\n"
            "- `vs_cold`: the warm run (same folder, new run directory, build cache filled) as a fraction of the "
            "cold run's wall time.\n"
            f"- cold run: {cold['records']} records ({statuses}); {cold['compiles']} items through the build "
            f"stage; {cold['references']} reference sessions started; device slots busy {cold['slot_busy_s']:.1f} s.\n"
            + "".join(f"- {name} run, mean per evaluated solution ({r['evaluated']}): candidate start and load "
                      f"{r['phases']['load_s']:.2f} s, reference start and correctness {r['phases']['correctness_s']:.2f} s, "
                      f"timing {r['phases']['timing_s']:.2f} s.\n" for name, r in results.items())
            + "".join(f"- {name} run, timeline (s from the pipeline's start): "
                      + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r["timeline"].items())
                      + ".\n" for name, r in results.items() if r["timeline"])
            + f"- settings: configs/default.toml, except timing.compile_baseline "
            f"{'auto' if args.compile_baseline else 'off'} and timeouts.run_s {args.run_timeout:g} (the hang costs "
            "that much device time).\n"
            + (f"- verdicts different from what the solution was written to get ({len(wrong)}):\n"
               + "".join(f"  - {w}\n" for w in wrong) if wrong else "- every verdict is the one the solution was "
                                                                 "written to get.\n"))


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _gpu_name(run: Path) -> str:
    try:
        env = json.loads((run / "env.json").read_text())
        return ", ".join(sorted({g["name"] for g in env.get("gpus", [])})) or "?"
    except (OSError, ValueError, KeyError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
