"""The C++ compiler a solution's build runs (`CXX`): the real one, given a precompiled
<torch/extension.h> where one was built for exactly its flags (harness/pch.py).

torch's load_inline compiles the main.cpp it generates (which starts with `#include
<torch/extension.h>`) with `$CXX ... -c main.cpp -o main.o`. gcc looks for `X.gch` in each include
folder before X, so with CPATH naming a folder that holds `torch/extension.h.gch/` it uses the
precompiled header, and falls back to the header where that does not fit. Matching the flags exactly
here (not leaving it to gcc) matters: gcc takes a header built at -O3 for an -O2 compile, and the code
then differs. Every other command passes through unchanged.

Run by harness/bin/g++ (`python -I -S`, stdlib only) from inside builds, jailed ones too: it reads
the folder of headers, which only the harness writes, and writes only a marker beside the object."""
from __future__ import annotations

import hashlib
import json
import os
import sys

NAME_FLAG = "-DTORCH_EXTENSION_NAME="


def flags(args: list[str]) -> list[str]:
    """A main.cpp compile's flags less what differs between extensions of the same flags: its
    name, its dependency file, its source and object."""
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-MF", "-o"):
            skip = True
            continue
        if a in ("-MMD", "-c") or a.startswith(NAME_FLAG) or a.endswith("main.cpp"):
            continue
        kept.append(a)
    return kept


def flags_key(args: list[str]) -> str:
    return hashlib.sha256(json.dumps(flags(args)).encode()).hexdigest()[:24]


def header_dir(root: str, args: list[str]) -> str | None:
    """The folder to put on CPATH for this command, where a header was built for its flags."""
    if "-c" not in args or not any(a.endswith("main.cpp") for a in args):
        return None
    d = os.path.join(root, flags_key(args))
    return d if os.path.isfile(os.path.join(d, "torch", "extension.h.gch", "v.gch")) else None


def main() -> None:
    args = sys.argv[1:]
    real = os.environ.get("HARNESS_REAL_CXX") or "c++"
    root = os.environ.get("HARNESS_PCH_ROOT")
    d = header_dir(root, args) if root else None
    if d is not None:
        os.environ["CPATH"] = os.pathsep.join(p for p in (d, os.environ.get("CPATH")) if p)
        if "-o" in args:
            try:  # the build's record of it (tests, and whoever wonders why a build was quick)
                with open(args[args.index("-o") + 1] + ".pch", "w") as fh:
                    fh.write(d + "\n")
            except OSError:
                pass
    os.execvp(real, [real] + args)


if __name__ == "__main__":
    main()
