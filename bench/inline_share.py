"""How many of a folder's solutions have load_inline calls the harness could read without running
them (harness/inline_args.py), and how many builds those would share: the measure of a build cache
keyed by an extension's own sources (#41).

    python bench/inline_share.py FOLDER [FOLDER ...]

Solutions are read as the batch reads them (a raw response's last fenced block). Prints the counts,
the builds the readable ones ask for and how many of them are distinct, and why the others could not
be read (the first part of each that is not a constant), most common first.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.inline_args import read  # noqa: E402
from harness.solutions import load_solution  # noqa: E402

SUFFIXES = {".py", ".md", ".txt"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args()
    files = sorted(f for d in args.folders for f in d.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
    with_calls, builds, why = 0, [], Counter()
    readable = 0
    for f in files:
        code = load_solution(f).code
        if not code or "load_inline" not in code:
            continue
        got, reason = read(code)
        if got == []:
            continue  # the text only, no call
        with_calls += 1
        if got is None:
            why[reason.split(":")[0][:60]] += 1
            continue
        readable += 1
        builds += [b.key() for b in got]
    print(f"{len(files)} files, {with_calls} call load_inline; {readable} of them readable without running "
          f"({100 * readable / max(1, with_calls):.0f}%): {len(builds)} builds, {len(set(builds))} distinct")
    for reason, n in why.most_common():
        print(f"  {n:4d}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
