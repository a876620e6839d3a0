"""What kernels a solution defines, read from its sources (used to confirm a custom kernel ran)."""
from __future__ import annotations

import re
from typing import Iterable, Optional, Union

LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
GLOBAL_FN = re.compile(r"__global__\s+(?:static\s+)?[\w:<>,\s\*&]*?\b(\w+)\s*\(")


def kernel_names(sources: Optional[Union[str, Iterable[str]]]) -> list[str]:
    if not sources:
        return []
    if isinstance(sources, str):
        sources = [sources]
    names: list[str] = []
    for src in sources:
        names.extend(GLOBAL_FN.findall(LAUNCH_BOUNDS.sub(" ", src)))
    return names


# kernels of the libraries a forward may run without the solution (PyTorch and what it ships):
# a name of the solution's that is nested in one of these namespaces is theirs, not the solution's
LIBRARY_NAMESPACES = ("2at", "3c10", "5torch", "3cub", "6thrust", "7cutlass", "4cute", "3cuda", "6triton")


def ran(defined: Iterable[str], seen: Iterable[str]) -> bool:
    """Did a kernel the solution defines (by its source name) run, going by the names of the kernels
    a forward ran (CUPTI's mangled names, or the profiler's demangled ones)? A whole name, never a
    part: a solution's `elementwise_kernel` is not PyTorch's `vectorized_elementwise_kernel`, nor is a
    `reduce_kernel` of its own at::native's, which ran in its place."""
    seen = list(seen)
    return any(_is(name, k) for k in set(defined) for name in seen)


def _is(name: str, k: str) -> bool:
    if name == k:  # extern "C", or a Triton kernel
        return True
    if name.startswith("_Z"):  # Itanium-mangled: <length><identifier> for each part of the name
        if name.startswith(f"_Z{len(k)}{k}"):  # a free function at global scope
            return True
        if name.startswith("_ZN") and not name[3:].startswith(LIBRARY_NAMESPACES):
            # the length before it fixes where the identifier ends; a digit before would be part of it
            return re.search(rf"(?<![0-9]){len(k)}{re.escape(k)}", name) is not None
        return False
    # demangled (torch.profiler): the identifier, not inside a library's namespace
    for m in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(k)}(?![A-Za-z0-9_])", name):
        scope = name[:m.start()].split("(")[0].split("<")[0].split()[-1:] or [""]
        if not scope[0].startswith(tuple(ns.lstrip("0123456789") + "::" for ns in LIBRARY_NAMESPACES)):
            return True
    return False
