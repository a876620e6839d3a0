"""Two runs (or two labels) side by side: per problem, each side's best passing speedup with its
interval, their ratio, and whether the difference is beyond noise.

A difference is beyond noise where the two speedups' intervals (each record's `speedup_ci`, the
bootstrap interval widened by the process-offset model) do not overlap: B faster where B's lower
bound is above A's upper bound, slower where B's upper bound is below A's lower bound. Where a side
has no interval, the difference is not judged; where both sides' best is the same code (its hash),
it is "same code", never faster or slower: two runs of one solution differ by the machine's drift
between them, which no record's interval holds (a new user's trial: 0.172x and 0.134x for one file,
microsecond forwards on a 2-core machine building beside them). Problems that only one side has are
listed, their other side empty. `mismatched` says where the sides were measured apart (devices,
hardware, torch, configs).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd

from .leaderboard import FINGERPRINT, best_status, fingerprint, fmt, md_table, load_records

COLUMNS = ["problem", "status_a", "speedup_a", "lo_a", "hi_a", "status_b", "speedup_b", "lo_b", "hi_b",
           "ratio", "difference"]


def best_per_problem(df: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: the fastest passing record (with its interval), else the best status."""
    rows = []
    for problem, g in df.groupby("problem", sort=True):
        passed = g[(g.status == "passed") & g.speedup.notna()]
        if not passed.empty:
            r = passed.loc[passed.speedup.idxmax()]
            rows.append({"problem": problem, "status": "passed", "speedup": float(r.speedup),
                         "lo": r.speedup_lo, "hi": r.speedup_hi, "code": r.solution_hash})
        else:
            rows.append({"problem": problem, "status": best_status(g.status), "speedup": None, "lo": None, "hi": None,
                         "code": None})
    return pd.DataFrame(rows, columns=["problem", "status", "speedup", "lo", "hi", "code"])


def _difference(r) -> Optional[str]:
    if pd.isna(r.speedup_a) or pd.isna(r.speedup_b):
        return None
    if isinstance(r.code_a, str) and r.code_a == r.code_b:
        return "same code"
    if any(pd.isna(x) for x in (r.lo_a, r.hi_a, r.lo_b, r.hi_b)):
        return "not judged"  # a side without an interval
    if r.lo_b > r.hi_a:
        return "faster"
    if r.hi_b < r.lo_a:
        return "slower"
    return "within noise"


def compare(run_a: str | Path, run_b: str | Path, label_a: Optional[str] = None, label_b: Optional[str] = None,
            signed_only: bool = False) -> pd.DataFrame:
    """Per problem of either side: A's and B's best (status, speedup, interval), B/A, and B's
    difference from A ("faster", "slower", "within noise", "not judged"). `label_a`/`label_b`: only
    that label's records of the run (the same run may be given twice, to compare two labels)."""
    sides, prints = [], []
    for run, label in ((run_a, label_a), (run_b, label_b)):
        df = load_records([run], signed_only=signed_only)
        if label is not None:
            df = df[df.label == label]
            if df.empty:
                raise LookupError(f"no records of label {label!r} in {run}")
        sides.append(best_per_problem(df))
        prints.append(fingerprint(df))
    a, b = sides
    out = a.merge(b, on="problem", how="outer", suffixes=("_a", "_b")).sort_values("problem")
    out["ratio"] = out.speedup_b / out.speedup_a
    out["difference"] = [_difference(r) for r in out.itertuples()]
    out = out[COLUMNS].reset_index(drop=True)
    out.attrs["mismatched"] = {k: [prints[0][k], prints[1][k]] for k in FINGERPRINT if prints[0][k] != prints[1][k]}
    return out


def summary(cmp: pd.DataFrame) -> dict:
    """How many problems both sides passed, how B's differ, and the geometric mean of B/A over them."""
    both = cmp[cmp.ratio.notna() & (cmp.ratio > 0)]
    counts = both.difference.value_counts()
    return {"problems": len(cmp), "both_passed": len(both),
            "faster": int(counts.get("faster", 0)), "slower": int(counts.get("slower", 0)),
            "within_noise": int(counts.get("within noise", 0)), "not_judged": int(counts.get("not judged", 0)),
            "same_code": int(counts.get("same code", 0)), "mismatched": cmp.attrs.get("mismatched", {}),
            "only_a_passed": int(((cmp.status_a == "passed") & (cmp.status_b != "passed")).sum()),
            "only_b_passed": int(((cmp.status_b == "passed") & (cmp.status_a != "passed")).sum()),
            "geomean_ratio": float(math.exp(both.ratio.map(math.log).mean())) if len(both) else None}


HEAD = ["problem", "A", "A interval", "B", "B interval", "B/A", "B is"]


def _cells(r) -> list[str]:
    def side(status, sp):
        return fmt(sp, "x") if status == "passed" else (status if isinstance(status, str) else "-")

    def interval(lo, hi):
        return "-" if pd.isna(lo) or pd.isna(hi) else f"{lo:.3f}-{hi:.3f}"
    return [str(r.problem), side(r.status_a, r.speedup_a), interval(r.lo_a, r.hi_a), side(r.status_b, r.speedup_b),
            interval(r.lo_b, r.hi_b), "-" if pd.isna(r.ratio) else f"{r.ratio:.3f}",
            r.difference if isinstance(r.difference, str) else "-"]


def summary_line(s: dict) -> str:
    geo = "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}"
    apart = "; ".join(f"{k} {' / '.join(map(str, v[0])) or '-'} (A) against {' / '.join(map(str, v[1])) or '-'} (B)"
                      for k, v in s.get("mismatched", {}).items())
    return (f"{s['problems']} problems, {s['both_passed']} passed by both: B faster on {s['faster']}, slower on "
            f"{s['slower']}, within noise on {s['within_noise']}"
            + (f", the same code on {s['same_code']}" if s.get("same_code") else "")
            + (f", not judged on {s['not_judged']}" if s["not_judged"] else "")
            + f"; geomean B/A {geo}; passed by A only {s['only_a_passed']}, by B only {s['only_b_passed']}"
            + (f". Measured apart, so not alike: {apart}" if apart else ""))


def render(cmp: pd.DataFrame, console, title: Optional[str] = None) -> None:
    from rich.table import Table

    from .leaderboard import wide
    console = wide(console)
    t = Table(title=title, title_justify="left")
    for h in HEAD:  # a narrow terminal folds the cells, never cuts them (two problems must stay apart)
        t.add_column(h, justify="left" if h in ("problem", "B is") else "right", overflow="fold")
    for r in cmp.itertuples():
        t.add_row(*_cells(r))
    console.print(t)
    console.print(summary_line(summary(cmp)), highlight=False, soft_wrap=True)


def markdown(cmp: pd.DataFrame, a: str, b: str) -> str:
    return (f"# Comparison\n\nA: `{a}`  \nB: `{b}`\n\n{summary_line(summary(cmp))}\n\n"
            + md_table(HEAD, [_cells(r) for r in cmp.itertuples()]))


def html(cmp: pd.DataFrame, a: str, b: str) -> str:
    """The comparison as one self-contained page, styled as report.html."""
    import html as _html

    from .runreport import html_page, html_table
    return html_page("Comparison", f"<p>A: {_html.escape(a)}<br>B: {_html.escape(b)}</p>"
                                   f"<p>{_html.escape(summary_line(summary(cmp)))}</p>"
                     + html_table(HEAD, [_cells(r) for r in cmp.itertuples()]))
