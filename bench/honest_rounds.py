"""Every honest fixture, several times, through the batch with the sandbox on: how often an honest
solution is rejected (issue 39's bar: never, five runs each, on the CPU and on a GPU).

    python bench/honest_rounds.py --device cpu --rounds 5 [--out /tmp/honest]
    python bench/honest_rounds.py --device cuda --rounds 5 --solutions 'solutions/*/cuda_*.py'

Honest: a fixture under tests/fixtures/<device>/ or tests/adversarial/<device>/ whose header expects
`status=passed` (on cuda, also the files --solutions names, each run on the problem of its folder).
Each is copied `--rounds` times into a batch tree, one batch per distinct header config, with the
default config otherwise and `--require-sandbox`. Prints one row per fixture (verdicts, speedups,
flags) and the count of records not passed; exits 1 if there is any."""
from __future__ import annotations

import argparse
import glob
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import fixtures_in, read_expectation  # noqa: E402  (the fixtures' `# expect:` headers)


def honest(device: str) -> list[tuple[Path, Path, tuple]]:
    """(solution, problem, config overrides) of every honest fixture for `device`."""
    folder = "gpu" if device == "cuda" else "cpu"
    out = []
    for p in fixtures_in(f"fixtures/{folder}", f"adversarial/{folder}"):
        exp = read_expectation(p)
        if exp.status == "passed":
            out.append((p, exp.problem, tuple(sorted(exp.overrides.items()))))
    return out


def toml_of(overrides: tuple) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in overrides)


def _wall_margin(r: dict):
    """The wall test's unexplained time over its floor (1.0: at the line a flag is raised), the
    largest of the record's measurements; None where it was not run."""
    tm = r.get("timing_method") or {}
    # every pair's wall test as it stood, and a flagged first measurement's (confirmed away)
    checks = list((tm.get("wall_check") or {}).values()) + [tm.get("clock_check")]
    vals = [c["wall_unexplained_ms"] / c["wall_floor_ms"] for c in checks
            if isinstance(c, dict) and c.get("wall_floor_ms") and c.get("wall_unexplained_ms") is not None]
    return max(vals) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--solutions", default="", help="a glob of more honest solutions (solutions/<problem>/x.py)")
    ap.add_argument("--out", default=None, help="where the batch trees and runs go (default: a temporary folder)")
    ap.add_argument("--timeout", type=int, default=3000, help="seconds for each batch")
    ap.add_argument("--only", default="", help="only the fixtures whose file name holds this")
    a = ap.parse_args()
    work = Path(a.out or tempfile.mkdtemp(prefix="honest-rounds-"))
    work.mkdir(parents=True, exist_ok=True)
    items = honest(a.device)
    for s in sorted(glob.glob(a.solutions)) if a.solutions else []:
        s = Path(s).resolve()
        found = [q for d in (ROOT / "problems", ROOT / "tests" / "problems") for q in d.rglob(f"{s.parent.name}.py")]
        if not found:
            raise SystemExit(f"no problem named {s.parent.name} for {s}")
        items.append((s, found[0], ()))
    items = [it for it in items if a.only in it[0].name]
    groups: dict[tuple, list] = defaultdict(list)
    for sol, prob, over in items:
        groups[over].append((sol, prob))
    records = []
    for g, (over, members) in enumerate(sorted(groups.items())):
        tree, probs, run = work / f"subs{g}", work / f"problems{g}", work / f"run{g}"
        for d in (tree, probs, run):
            shutil.rmtree(d, ignore_errors=True)
        probs.mkdir(parents=True)
        for sol, prob in members:
            shutil.copy(prob, probs / prob.name)
            (tree / prob.stem).mkdir(parents=True, exist_ok=True)
            for i in range(a.rounds):
                shutil.copy(sol, tree / prob.stem / f"{sol.stem}__r{i}{sol.suffix}")
        cmd = [sys.executable, "-m", "harness.cli", "batch", str(tree), "--problems", str(probs), "--out", str(run),
               "--device", a.device, "--require-sandbox", "-q"]
        if over:
            (work / f"config{g}.toml").write_text(toml_of(over))
            cmd += ["--config", str(work / f"config{g}.toml")]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, timeout=a.timeout, check=False)
        f = run / "results.jsonl"
        if f.exists():
            records += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    rows: dict[str, list] = defaultdict(list)
    for r in records:
        rows[Path(r["solution"]).stem.rsplit("__r", 1)[0]].append(r)
    print(f"\n| fixture | runs | verdicts | speedup min / median / max | wall margin max | flags |\n|---|---:|---|---|---:|---|")
    bad = 0
    for name in sorted(rows):
        rs = rows[name]
        st = defaultdict(int)
        for r in rs:
            st[r["status"]] += 1
        bad += sum(n for s, n in st.items() if s != "passed")
        sp = [r["speedup"] for r in rs if r.get("speedup")]
        flags = sorted({f for r in rs for f in r.get("flags", [])})
        spd = f"{min(sp):.3f} / {statistics.median(sp):.3f} / {max(sp):.3f}" if sp else "-"
        why = "; ".join(sorted({(r.get("error") or "")[:80] for r in rs if r["status"] != "passed"}))
        margins = [m for r in rs if (m := _wall_margin(r)) is not None]
        print(f"| {name} | {len(rs)} | {', '.join(f'{s} {n}' for s, n in sorted(st.items()))}{' (' + why + ')' if why else ''}"
              f" | {spd} | {f'{max(margins):.2f}' if margins else '-'} | {', '.join(flags) or '-'} |")
    missing = len(items) * a.rounds - len(records)
    print(f"\n{len(records)} records, {bad} not passed, {missing} missing; protections: "
          f"{sorted({p for r in records for p in r.get('protections', [])})}")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
