"""A lighter <torch/extension.h> for nvcc's pass over a solution's .cu (`[batch] light_cuda_header`).

A load_inline .cu almost always starts with `#include <torch/extension.h>`: torch's whole C++
frontend and its Python bindings (pybind11, Python.h), which its kernels and launchers do not use.
nvcc has no precompiled headers, so it parses them all, twice (its front end and its host compile):
on the development VM a relu kernel's cuda.cuda.o took 55 CPU-s with it and 24 with
<torch/types.h> in its place (bench/results/build-cost.md). torch's load_inline already puts
<torch/types.h> at the top of every .cu.

A build's first try runs nvcc with `-I harness/include/light` ahead of torch's include folders
(NVCC_PREPEND_FLAGS: the command line, which ninja and torch's build hash keep, does not change), so
the .cu's `<torch/extension.h>` is harness/include/light/torch/extension.h. main.cpp, compiled by
the C++ compiler, still gets torch's own. A .cu that needs more (py::, torch::nn, ...) fails to
compile, and the build is run again as torch gives it (build.build_child): the light header never
turns a solution that compiles into a compile_error. A solution whose source names what only the
full header has is built with it from the start."""
from __future__ import annotations

import os
import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "include" / "light"

# what only the full <torch/extension.h> declares: its Python bindings and the C++ frontend
_NEEDS_FULL = re.compile(r"\bpy::|pybind11|PYBIND11|Python\.h|\bPy(Object|_\w+|[A-Z][a-z]+_\w+)|\bTHP\w*|HANDLE_TH_ERRORS|"
                         r"torch::(nn|optim|data|python|jit|serialize|autograd)\b|torch/(all|python|nn|optim)\.h")


def fits(code: str) -> bool:
    """Whether a first try with the light header is worth it: the solution's source names nothing
    only the full header declares."""
    return "cuda_sources" in code and not _NEEDS_FULL.search(code)


def first_try(cfg, device: str, code: str) -> bool:
    """Whether a solution's build tries the light header first (`[batch] light_cuda_header`)."""
    return cfg.batch.light_cuda_header and device == "cuda" and fits(code)


def env() -> dict[str, str]:
    """The build child's environment for a first try with the light header."""
    return {"NVCC_PREPEND_FLAGS": " ".join(filter(None, [f"-I{FOLDER}", os.environ.get("NVCC_PREPEND_FLAGS", "")]))}
