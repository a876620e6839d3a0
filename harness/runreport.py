"""A run's report for people: `report.md` and a self-contained `report.html` beside results.jsonl,
with four plots made by matplotlib (speedup per problem with its interval, the speedups' distribution
per label, fast_p over p, statuses per label) and the hardware and software the numbers came from.
`harness report RUN...` makes them again for one run or several merged (leaderboard.py's rules).

The page has no script and loads nothing: plots are inline SVG, styles inline, so it opens from a
file, an attachment or an artifact store alike."""
from __future__ import annotations

import html
import io
import json
import math
import re
from pathlib import Path
from typing import Optional

import pandas as pd

from .leaderboard import (CAVEAT_NOTE, PROBLEM_HEAD, STATUS_ORDER, SUMMARY_HEAD, best_passing, caveated, label_summary,
                          load_records, md_table, per_problem, problem_cells, summary_cells, text_cell)
from .report import clip

PLOTS = ("speedups", "distribution", "fast_p", "statuses")
STATUS_COLOR = {"passed": "#2e7d32", "incorrect": "#c62828", "timeout": "#f9a825", "runtime_error": "#e53935",
                "compile_error": "#ef9a9a", "rejected": "#6a1b9a", "interface_error": "#ab47bc",
                "no_code": "#9e9e9e", "too_big": "#00838f", "unsupported": "#80deea"}


def fingerprints(runs: list[Path]) -> list[dict]:
    """Each run's machine and stack, from its env.json (batch) or its records (a results file alone)."""
    out = []
    for run in runs:
        folder = run if run.is_dir() else run.parent
        env_file = folder / "env.json"
        if not env_file.exists():
            out.append({"run": str(folder)})
            continue
        e = json.loads(env_file.read_text())
        smi = e.get("nvidia_smi") or []
        out.append({"run": str(folder), "created": e.get("created"), "host": e.get("host"),
                    "device": e.get("device"),
                    "gpus": ", ".join(f"{g.get('name')} ({g.get('memory.total', '?')})" for g in smi)
                    or ", ".join(g.get("name", "?") for g in e.get("gpus") or []) or "-",
                    "driver": ", ".join(sorted({str(g.get("driver_version")) for g in smi})) or "-",
                    "torch": e.get("torch"), "cuda": e.get("torch_cuda") or "-", "python": e.get("python"),
                    "harness": e.get("harness"), "cpu": f"{e.get('cpu')} x {e.get('cpu_count')}",
                    "platform": e.get("platform")})
    return out


def natural(name: str) -> list:
    """level2/10_x after level2/9_x: numbers in a name compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # without the XML prolog and doctype: inline in HTML


def plots(df: pd.DataFrame, summary: pd.DataFrame) -> dict[str, str]:
    """The four plots as SVG text, by name (PLOTS)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: a tenth of the size, and searchable
    labels = list(summary.label)
    colors = {lb: plt.get_cmap("tab10")(i % 10) for i, lb in enumerate(labels)}
    out: dict[str, str] = {}

    best = best_passing(df).sort_values(["problem", "label"])  # with each one's interval
    problems = sorted(df.problem.unique(), key=natural)
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.28 * len(problems) + 1.2)))
    y = {p: i for i, p in enumerate(problems)}
    k = max(1, len(labels))
    for j, lb in enumerate(labels):
        b = best[best.label == lb]
        if b.empty:
            continue
        ys = [y[p] + (j - (k - 1) / 2) * 0.8 / k for p in b.problem]
        lo = (b.speedup - b.speedup_lo.fillna(b.speedup)).clip(lower=0)
        hi = (b.speedup_hi.fillna(b.speedup) - b.speedup).clip(lower=0)
        ax.errorbar(b.speedup, ys, xerr=[lo, hi], fmt="o", ms=4, capsize=2, color=colors[lb], label=lb)
    ax.axvline(1.0, color="#555", lw=0.8, ls="--")
    ax.set_yticks(range(len(problems)), problems, fontsize=7)
    ax.set_ylim(len(problems) - 0.5, -0.5)
    if not best.empty:
        ax.set_xscale("log")
    ax.set_xlabel("best speedup over the reference (95% interval; log scale)")
    ax.set_title("Speedup per problem (problems without a passing solution: no point)")
    if len(labels) > 1:
        ax.legend(fontsize=8)
    out["speedups"] = _svg(fig)

    fig, ax = plt.subplots(figsize=(9, 3.2))
    data = [df[(df.label == lb) & (df.status == "passed") & (df.speedup > 0)].speedup.tolist() for lb in labels]
    if any(data):
        # bins even in log space, a decade wide at the least: equal speedups still make a visible bar
        lo = math.log10(min(min(d) for d in data if d))
        hi = math.log10(max(max(d) for d in data if d))
        mid, half = (lo + hi) / 2, max((hi - lo) / 2, 0.5)
        bins = [10 ** (mid - half + 2 * half * i / 24) for i in range(25)]
        for lb, d in zip(labels, data):
            if d:
                ax.hist(d, bins=bins, alpha=0.55, color=colors[lb], label=f"{lb} ({len(d)})")
        ax.set_xscale("log")
        ax.axvline(1.0, color="#555", lw=0.8, ls="--")
        ax.legend(fontsize=8)
    ax.set_xlabel("speedup of each passing solution (log scale)")
    ax.set_ylabel("solutions")
    ax.set_title("Distribution of speedups per label")
    out["distribution"] = _svg(fig)

    fig, ax = plt.subplots(figsize=(9, 3.2))
    top = max([2.0] + [float(s) for s in best.speedup if s == s])
    ps = [top * 1.05 * i / 200 for i in range(201)]
    for _, r in summary.iterrows():
        b = best[best.label == r.label].speedup
        n = max(1, int(r.problems))
        ax.step(ps, [float((b > p).sum()) / n for p in ps], where="post", color=colors[r.label], label=r.label)
    ax.axvline(1.0, color="#555", lw=0.8, ls="--")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("p")
    ax.set_ylabel("fast_p")
    ax.set_title("fast_p: the fraction of problems solved faster than p times the reference")
    ax.legend(fontsize=8)
    out["fast_p"] = _svg(fig)

    fig, ax = plt.subplots(figsize=(9, max(1.8, 0.45 * len(labels) + 1.0)))
    left = [0] * len(labels)
    for s in STATUS_ORDER:
        counts = [int(summary.loc[summary.label == lb, s].iloc[0]) for lb in labels]
        if sum(counts):
            ax.barh(labels, counts, left=left, color=STATUS_COLOR.get(s, "#999"), label=s)
            left = [a + b for a, b in zip(left, counts)]
    ax.invert_yaxis()
    ax.set_xlabel("solutions")
    ax.set_title("Statuses per label")
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    out["statuses"] = _svg(fig)
    return out


def html_page(title: str, body: str) -> str:
    """A self-contained page (no script, nothing loaded): `body` under the escaped `title`."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _fp_rows(fps: list[dict]) -> tuple[list[str], list[list[str]]]:
    keys = ["run", "created", "device", "gpus", "driver", "torch", "cuda", "python", "harness", "host", "cpu"]
    return keys, [[str(f.get(k) or "-") for k in keys] for f in fps]


CSS = ("body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}"
       "table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px}"
       "th{background:#f3f3f3;text-align:left}td{font-variant-numeric:tabular-nums}"
       "figure{margin:1.5em 0}svg{max-width:100%;height:auto}h2{margin-top:1.6em}")


def write(runs: list[str | Path], out_dir: str | Path, signed_only: bool = True) -> Optional[tuple[Path, Path]]:
    """report.md (its plots in report_plots/) and report.html in `out_dir`; None when the runs hold no record."""
    runs = [Path(r) for r in runs]
    df = load_records(runs, signed_only=signed_only)
    if df.empty:
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pp, summary = per_problem(df), label_summary(df)
    pp = pp.iloc[sorted(range(len(pp)), key=lambda i: (pp.label.iat[i], natural(pp.problem.iat[i])))]
    svgs = plots(df, summary)
    fps = fingerprints(runs)
    fp_head, fp_rows = _fp_rows(fps)
    sum_rows = [summary_cells(r) for _, r in summary.iterrows()]
    prob_rows = [problem_cells(r) for _, r in pp.iterrows()]
    sol_head = ["label", "problem", "solution", "status", "speedup", "size", "flags", "why it failed"]
    sol_rows = [[r.label, r.problem, Path(str(r.solution)).name, r.status,
                 "-" if r.speedup != r.speedup or r.speedup is None else f"{r.speedup:.3f}x" + ("*" if caveated(r.flags) else ""),
                 text_cell(r.size), text_cell(r.flags).replace(",", ", "), clip(r.error or "", 160)]
                for r in sorted(df.itertuples(), key=lambda r: (r.label, natural(r.problem), str(r.solution)))]
    caveats = "* " + CAVEAT_NOTE if any(caveated(f) for f in df["flags"]) else ""
    title = f"{len(df)} records, {df.problem.nunique()} problems, {df.label.nunique()} label(s)"
    note = ("fast_p: the fraction of problems with a passing solution faster than p times the reference; "
            "problems whose solutions all need hardware the machine lacked (unsupported) are left out.")

    plot_dir = out_dir / "report_plots"
    plot_dir.mkdir(exist_ok=True)
    for name, svg in svgs.items():
        (plot_dir / f"{name}.svg").write_text(svg)
    md = (f"# Report: {title}\n\nRuns: " + ", ".join(f"`{r}`" for r in runs) + "\n\n## Per label\n\n"
          + md_table(SUMMARY_HEAD, sum_rows) + f"\n{note}\n\n"
          + "".join(f"![{n}](report_plots/{n}.svg)\n\n" for n in PLOTS)
          + "## Per problem\n\n" + md_table(PROBLEM_HEAD, prob_rows)
          + "\n## Per solution\n\n" + md_table(sol_head, sol_rows) + (f"\n\\{caveats}\n" if caveats else "")
          + "\n## Hardware and software\n\n" + md_table(fp_head, fp_rows))
    md_path = out_dir / "report.md"
    md_path.write_text(md)

    page = html_page(title, f"<p>Runs: {html.escape(', '.join(str(r) for r in runs))}</p>"
                     f"<h2>Per label</h2>{html_table(SUMMARY_HEAD, sum_rows)}<p>{html.escape(note)}</p>"
                     + "".join(f"<figure id='{n}'>{svgs[n]}</figure>" for n in PLOTS)
                     + f"<h2>Per problem</h2>{html_table(PROBLEM_HEAD, prob_rows)}"
                     f"<h2>Per solution</h2>{html_table(sol_head, sol_rows)}"
                     + (f"<p>{html.escape(caveats)}</p>" if caveats else "") +
                     f"<h2>Hardware and software</h2>{html_table(fp_head, fp_rows)}")
    html_path = out_dir / "report.html"
    html_path.write_text(page)
    return md_path, html_path
