"""Leaderboards: runs' results.jsonl merged into one row per (label, problem) and a summary per label.

Per (label, problem): the best status among its solutions (passed if any passed), how many solutions
and how many passed, and the best passing speedup with its runtime. Per label: record counts per
status, fast_p for p in FAST_P (the fraction of the run's problems where the label has a passing
solution faster than p times the reference, i.e. speedup > p; fast_0 is the fraction solved;
problems without a passing solution count as failures; the denominator is every problem in the
merged runs, attempted or not, less those where every solution of the label is `unsupported`: it
needs hardware the machine lacked, which says nothing of it), and the geometric-mean speedup over the
label's passing solutions.

Merging: when the same solution (label, problem, solution_hash) has records in several runs, the last
one given (and within a run, the last written) stands.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
STATUS_ORDER = ["passed", "incorrect", "timeout", "runtime_error", "compile_error", "rejected",
                "interface_error", "no_code", "too_big", "unsupported"]
COLUMNS = ["run", "label", "problem", "solution", "status", "speedup", "speedup_lo", "speedup_hi", "runtime_ms",
           "ref_runtime_ms", "solution_hash", "problem_hash", "config_hash", "device", "size", "gpu", "torch", "flags",
           "error"]
# what a number was measured on, beside it in every exported table (a new user's trial: a CSV lost it)
FINGERPRINT = ["device", "gpu", "torch", "config_hash"]
# flags that put a speedup itself in question (docs/record.md): a table marks a best speedup that has one
CAVEATS = ("reference_contended", "candidate_contended", "cpu_oversubscribed", "no_custom_kernel", "device_not_quiet",
           "excessive_speedup")


def fast_col(p: float) -> str:
    return f"fast_{p:g}"


def results_file(run: str | Path) -> Path:
    p = Path(run)
    return p / "results.jsonl" if p.is_dir() else p


def load_records(runs: Iterable[str | Path], signed_only: bool = False) -> pd.DataFrame:
    """One row per record of the runs. `signed_only`: only records this harness signed
    (records/signing.py): a run's own tables, which a forged line must not enter."""
    from .batch.runfolder import read_records, run_id
    rows = []
    for order, run in enumerate(runs):
        path = results_file(run)
        if not path.exists():
            raise FileNotFoundError(f"no results at {path}")
        records, _ = read_records(path, signed_only, run_id(path.parent))
        for n, r in enumerate(records):
            if "problem" not in r or "status" not in r:
                continue
            env = r.get("env") or {}
            rows.append({"run": str(path.parent if path.name == "results.jsonl" else path), "order": (order, n),
                         "label": r.get("label") or "-", "problem": r["problem"], "solution": r.get("solution", ""),
                         "status": r["status"], "speedup": r.get("speedup"),
                         "speedup_lo": (r.get("speedup_ci") or [None, None])[0],
                         "speedup_hi": (r.get("speedup_ci") or [None, None])[1], "runtime_ms": r.get("runtime_ms"),
                         "ref_runtime_ms": r.get("ref_runtime_ms"), "solution_hash": r.get("solution_hash"),
                         "problem_hash": r.get("problem_hash"), "config_hash": r.get("config_hash"),
                         "device": r.get("device"), "size": r.get("size"), "gpu": env.get("gpu_name") or env.get("cpu"),
                         "torch": env.get("torch"), "flags": ",".join(r.get("flags") or []),
                         "error": (r.get("error") or "").split("\n", 1)[0]})
    df = pd.DataFrame(rows, columns=COLUMNS + ["order"])
    if df.empty:
        return df.drop(columns="order")
    df = df.sort_values("order")
    df = df.drop_duplicates(subset=["label", "problem", "solution", "solution_hash"], keep="last")
    for col in ("speedup", "speedup_lo", "speedup_hi", "runtime_ms", "ref_runtime_ms"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df.drop(columns="order").reset_index(drop=True)


def best_status(statuses: pd.Series) -> str:
    present = set(statuses)
    return next((s for s in STATUS_ORDER if s in present), statuses.iloc[0])


def best_passing(df: pd.DataFrame) -> pd.DataFrame:
    """Per (label, problem) the passing record with the best speedup (the leaderboard's, the report's)."""
    passed = df[(df.status == "passed") & df.speedup.notna()]
    if passed.empty:
        return passed
    return passed.loc[passed.groupby(["label", "problem"]).speedup.idxmax()]


def per_problem(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (label, problem)."""
    rows = []
    bests = {(r.label, r.problem): r for r in best_passing(df).itertuples(index=False)}
    for (label, problem), g in df.groupby(["label", "problem"], sort=True):
        best = bests.get((label, problem))
        seen = best if best is not None else next(g.itertuples(index=False))
        rows.append({"label": label, "problem": problem, "status": best_status(g.status),
                     "solutions": len(g), "passed": int((g.status == "passed").sum()),
                     "best_speedup": None if best is None else float(best.speedup),
                     "runtime_ms": None if best is None else best.runtime_ms,
                     "ref_runtime_ms": None if best is None else best.ref_runtime_ms,
                     "best_solution": None if best is None else best.solution,
                     "size": None if best is None else best.size, "flags": "" if best is None else best.flags,
                     **{k: getattr(seen, k) for k in FINGERPRINT}})
    return pd.DataFrame(rows, columns=["label", "problem", "status", "solutions", "passed", "best_speedup",
                                       "runtime_ms", "ref_runtime_ms", "best_solution", "size", "flags", *FINGERPRINT])


def label_summary(df: pd.DataFrame, n_problems: Optional[int] = None) -> pd.DataFrame:
    """One row per label: counts per status (over solutions), fast_p (over problems), geomean speedup
    (over passing solutions)."""
    n_problems = n_problems or df.problem.nunique()
    counts = (df.groupby(["label", "status"]).size().unstack(fill_value=0)
              .reindex(columns=STATUS_ORDER, fill_value=0))
    best = best_passing(df)[["label", "problem", "speedup"]]
    rows = []
    for label in sorted(df.label.unique()):
        mine = df[df.label == label]
        b = best[best.label == label].speedup
        passed_sp = mine[(mine.status == "passed") & (mine.speedup > 0)].speedup
        # problems this label's solutions could not be run on here (all `unsupported`): no failures,
        # out of solved and fast_p (a CPU machine given CUDA solutions)
        unsupported = int(mine.groupby("problem").status.apply(lambda s: (s == "unsupported").all()).sum())
        n = max(0, n_problems - unsupported)
        row = {"label": label, "problems": n, "attempted": mine.problem.nunique() - unsupported,
               "unsupported_problems": unsupported, "solved": int(len(b)), "solutions": len(mine)}
        row.update({s: int(counts.loc[label, s]) for s in STATUS_ORDER})
        # no problem it could be scored on: no fraction at all, not 0
        row.update({fast_col(p): (float((b > p).sum()) / n if n else None) for p in FAST_P})
        row["geomean_speedup"] = float(math.exp(passed_sp.map(math.log).mean())) if len(passed_sp) else None
        # where its numbers were measured: every device, hardware, torch and config among its records
        row.update({k: ";".join(vals) for k, vals in fingerprint(mine).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def write_csv(pp: pd.DataFrame, summary: pd.DataFrame, path: str | Path) -> tuple[Path, Path]:
    """`path` gets the (label, problem) rows; `<stem>_summary.csv` beside it the per-label summary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for_csv(pp).to_csv(path, index=False)
    spath = path.with_name(path.stem + "_summary" + (path.suffix or ".csv"))
    for_csv(summary).to_csv(spath, index=False)
    return path, spath


def for_csv(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers rounded to what they mean (speedups and fractions to 4 places, times to 0.01 us) and
    solution paths relative to the current folder where they lie under it."""
    import os
    df = df.copy()
    for col in df.columns:
        if col in ("runtime_ms", "ref_runtime_ms", "best_speedup", "geomean_speedup"):  # None where none passed
            df[col] = pd.to_numeric(df[col], errors="coerce")
        if col in ("runtime_ms", "ref_runtime_ms"):
            df[col] = df[col].round(5)
        elif pd.api.types.is_float_dtype(df[col]):
            df[col] = df[col].round(4)
    here = os.getcwd()

    def rel(p):
        if not isinstance(p, str) or not os.path.isabs(p):
            return p
        r = os.path.relpath(p, here)
        return p if r.startswith("..") else r
    for col in ("solution", "best_solution"):
        if col in df.columns:
            df[col] = df[col].map(rel)
    return df


def fmt(v, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "x":
        return f"{v:.3f}x"
    if kind == "ms":
        return f"{v * 1e3:.1f} us" if v < 1 else f"{v:.3f} ms"
    if kind == "frac":
        return f"{v:.2f}"
    return str(v)


def summary_cells(r) -> list[str]:
    counts = ", ".join(f"{s} {int(r[s])}" for s in STATUS_ORDER if r[s])
    return ([str(r["label"]), f"{int(r['solved'])}/{int(r['problems'])}", str(int(r["solutions"])), counts]
            + [fmt(r[fast_col(p)], "frac") for p in FAST_P] + [fmt(r["geomean_speedup"], "x")])


SUMMARY_HEAD = ["label", "solved", "solutions", "statuses"] + [fast_col(p) for p in FAST_P] + ["geomean"]
PROBLEM_HEAD = ["label", "problem", "status", "passed", "best speedup", "runtime", "reference", "size", "its flags"]


CAVEAT_NOTE = ("a speedup with a flag that puts it in question: " + ", ".join(CAVEATS)
               + " (docs/record.md)")


def caveated(flags) -> bool:
    return any(f in CAVEATS for f in str(flags or "").split(","))


def caveat_note(pp: pd.DataFrame) -> str:
    """The note under a per-problem table, where a row's best speedup is marked."""
    return "* " + CAVEAT_NOTE if any(caveated(f) for f in pp.get("flags", [])) else ""


def problem_cells(r) -> list[str]:
    """The best passing solution's speedup, times, size and flags; its speedup marked * where a flag
    puts it in question (CAVEATS)."""
    best = fmt(r["best_speedup"], "x") + ("*" if pd.notna(r["best_speedup"]) and caveated(r.get("flags")) else "")
    return [str(r["label"]), str(r["problem"]), str(r["status"]), f"{int(r['passed'])}/{int(r['solutions'])}",
            best, fmt(r["runtime_ms"], "ms"), fmt(r["ref_runtime_ms"], "ms"), text_cell(r.get("size")),
            text_cell(r.get("flags")).replace(",", ", ")]


def text_cell(v) -> str:
    """A text column's cell: "-" for none (pandas reads a missing one as NaN)."""
    return v if isinstance(v, str) and v else "-"


def wide(console):
    """Tables printed to a file or a pipe are not squeezed into 80 columns."""
    if console.is_terminal or console.width >= 160:
        return console
    from rich.console import Console
    return Console(file=console.file, width=160, no_color=console.no_color)


# a terminal narrower than the full table gets KernelBench's headline fast_p and the statuses last,
# wrapped in their cell: nothing cut, within 80 columns
NARROW_FAST_P = (0.0, 1.0, 2.0)
NARROW_HEAD = ["label", "solved", "solutions"] + [fast_col(p) for p in NARROW_FAST_P] + ["geomean", "statuses"]


def narrow(console) -> bool:
    return console.is_terminal and console.width < 140


def render_summary(summary: pd.DataFrame, console, title: Optional[str] = None) -> None:
    from rich.table import Table
    small = narrow(console)
    console = console if small else wide(console)
    head = NARROW_HEAD if small else SUMMARY_HEAD
    t = Table(title=title, title_justify="left", padding=(0, 1 if not small else 0))
    for h in head:
        t.add_column(h, justify="left" if h in ("label", "statuses") else "right",
                     overflow="fold", no_wrap=h not in ("label", "statuses"))
    for _, r in summary.iterrows():
        cells = dict(zip(SUMMARY_HEAD, summary_cells(r)))
        t.add_row(*(cells[h] for h in head))
    console.print(t)


def render_problems(pp: pd.DataFrame, console, title: Optional[str] = None) -> None:
    from rich.table import Table

    from .report import STATUS_STYLE
    from rich import box
    small = narrow(console)
    console = console if small else wide(console)
    head = PROBLEM_HEAD
    if small:  # the problem's whole name first; times are in the CSV and --markdown
        head = (["label"] if pp["label"].nunique() > 1 else []) + ["problem", "status", "passed", "best speedup"]
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if small else box.HEAVY_HEAD, pad_edge=not small,
              caption="; ".join(c for c in ("best: the best passing speedup; runtimes and flags in --csv and --markdown, "
                                            "or a wider terminal" if small else "", caveat_note(pp)) if c) or None,
              caption_justify="left")
    rows = [dict(zip(PROBLEM_HEAD, problem_cells(r))) for _, r in pp.iterrows()]
    names = {h: "best" if small and h == "best speedup" else h for h in head}
    widths = {h: max([len(names[h])] + [len(r[h]) for r in rows]) for h in head}
    # a narrow terminal's width left by the other columns goes to the problem's name (folded beyond)
    rest = console.width - sum(w + 3 for h, w in widths.items() if h != "problem") - 4
    for h in head:
        t.add_column(names[h], justify="right" if h in ("passed", "best speedup", "runtime", "reference") else "left",
                     overflow="fold", no_wrap=h not in ("label", "problem"),
                     width=max(12, min(widths[h], rest)) if small and h == "problem" else None)
    for cells in rows:
        cells["status"] = f"[{STATUS_STYLE.get(cells['status'], 'default')}]{cells['status']}[/]"
        t.add_row(*(cells[h] for h in head))
    console.print(t)


def md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def fingerprint(df: pd.DataFrame) -> dict[str, list[str]]:
    """Per FINGERPRINT column, every value among the rows (a label summary's cells hold several, ";"-joined)."""
    return {k: sorted({v for cell in df.get(k, pd.Series(dtype=object)).dropna() for v in str(cell).split(";") if v})
            for k in FINGERPRINT}


def measured_on(df: pd.DataFrame) -> str:
    """One line: every device, hardware, torch and config the rows were measured with."""
    parts = [f"{ {'gpu': 'hardware', 'config_hash': 'config'}.get(k, k)} {', '.join(vals)}"
             for k, vals in fingerprint(df).items() if vals]
    return "Measured on: " + "; ".join(parts) if parts else ""


def markdown(pp: pd.DataFrame, summary: pd.DataFrame, runs: list[str]) -> str:
    on = measured_on(pp)
    return ("# Leaderboard\n\nRuns: " + ", ".join(f"`{r}`" for r in runs) + (f"\n\n{on}" if on else "")
            + "\n\n## Per label\n\n"
            + md_table(SUMMARY_HEAD, [summary_cells(r) for _, r in summary.iterrows()])
            + "\n## Per problem\n\n"
            + md_table(PROBLEM_HEAD, [problem_cells(r) for _, r in pp.iterrows()])
            + (f"\n\\{caveat_note(pp)}\n" if caveat_note(pp) else ""))


def warn_mixed(df: pd.DataFrame, console) -> None:
    """Speedups from different configs or hardware do not belong in one ranking: say so."""
    seen = fingerprint(df)
    for col, what in (("config_hash", "configs"), ("gpu", "devices")):
        vals = seen[col]
        if len(vals) > 1:
            console.print(f"[yellow]warning[/]: these records come from {len(vals)} {what}: {', '.join(vals[:4])}",
                          highlight=False, soft_wrap=True)


def summary_json(summary: pd.DataFrame) -> str:
    rows = json.loads(summary.to_json(orient="records"))
    return json.dumps(rows)

