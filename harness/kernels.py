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
