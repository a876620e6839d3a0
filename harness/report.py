"""Rendering records for people: rich tables on the terminal."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .records.result import EvalResult

STATUS_STYLE = {"passed": "bold green", "incorrect": "bold red", "compile_error": "red", "runtime_error": "red",
                "timeout": "yellow", "no_code": "dim", "interface_error": "magenta", "rejected": "bold magenta",
                "too_big": "cyan", "unsupported": "dim cyan"}


def clip(text: str, n: int) -> str:
    """At most about `n` characters, cut at a word, with an ellipsis where cut."""
    if len(text) <= n:
        return text
    cut = text[:n].rsplit(" ", 1)[0]
    cut = cut if len(cut) > n // 2 else text[:n]
    return cut + " …" + ")" * max(0, cut.count("(") - cut.count(")"))  # what it opened, closed


def _ms(x):
    return "-" if x is None else (f"{x * 1e3:.1f} us" if x < 1 else f"{x:.3f} ms")


def print_result(r: EvalResult, console: Console) -> None:
    t = Table(title=f"{r.solution}  on  {r.problem}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("status", f"[{STATUS_STYLE.get(r.status.value, 'default')}]{r.status.value}[/]")
    if r.flags:
        t.add_row("flags", ", ".join(r.flags))
    if r.speedup is not None:
        ci = f"  (95% CI {r.speedup_ci[0]:.3f}-{r.speedup_ci[1]:.3f})" if r.speedup_ci else ""
        slower = "  (slower than the reference)" if r.speedup_ci and r.speedup_ci[1] < 1 else ""
        t.add_row("speedup", f"{r.speedup:.3f}x{ci}{slower}")
    if r.size:
        t.add_row("size", "the problem's own shapes (full)" if r.size == "full" else
                  f"{r.size}: the problem's CPU preset, not its own shapes (--size full for those)")
    if r.runtime_stats:
        s = r.runtime_stats
        t.add_row("candidate", f"median {_ms(s.median)}  mean {_ms(s.mean)}  std {_ms(s.std)}  n={s.count}")
    if r.ref_runtime_stats:
        s = r.ref_runtime_stats
        t.add_row("reference", f"median {_ms(s.median)}  mean {_ms(s.mean)}  std {_ms(s.std)}  n={s.count}")
    if r.max_abs_diff is not None:
        t.add_row("max |diff|", f"{r.max_abs_diff:.3g} abs, {r.rel_l2_diff or 0:.3g} rel L2")
    if r.error:
        t.add_row("error", r.error if len(r.error) < 2000 else r.error[:2000] + " ...")
    if r.env:
        e = r.env
        hw = e.gpu_name or e.cpu or e.device
        t.add_row("env", f"{hw}  torch {e.torch}" + (f"  CUDA {e.cuda}  driver {e.driver}" if e.cuda else ""))
    p = r.phases
    t.add_row("phases", f"compile {p.compile_s:.1f}s  load {p.load_s:.1f}s  check {p.correctness_s:.1f}s  "
                        f"time {p.timing_s:.1f}s  total {p.total_s:.1f}s")
    console.print(t)
