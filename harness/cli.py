"""The `harness` command: a thin layer over the library. Heavy imports happen inside commands, so
`harness --help` is instant. Records go to stdout (JSON with --json); logs and progress to stderr."""
from __future__ import annotations

import sys
from typing import Optional

import click

from .version import __version__


# exit codes, for scripts and pipelines: a verdict, a user's mistake and the harness's own failure
# are told apart (README "Exit codes")
EXIT_PASSED, EXIT_VERDICT, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


class HarnessFailed(click.ClickException):
    """No verdict, through no mistake of the user's: a problem that fails, a batch item left
    without a record, the harness's own error."""

    exit_code = EXIT_HARNESS


class UsageFailed(click.ClickException):
    exit_code = EXIT_USAGE


def _console(stderr: bool = True):
    from rich.console import Console
    return Console(stderr=stderr)


# the config keys that command-line options set: an error in one names the option
OPTION_KEYS = {"device": "--device", "size": "--size", "dtype": "--dtype", "correctness.trials": "--trials"}


def _config(config_path: Optional[str], **overrides):
    import tomllib

    from pydantic import ValidationError

    from .config import explain, load_config
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return load_config(config_path, given)
    except tomllib.TOMLDecodeError as e:
        raise click.BadParameter(f"not valid TOML: {e}", param_hint=f"--config {config_path}") from None
    except ValidationError as e:  # a misspelt or mistyped key: name it, not a traceback
        bad = {".".join(str(x) for x in err["loc"]) for err in e.errors()}
        from_options = bad <= {k for k in given if k in OPTION_KEYS}
        raise click.BadParameter(explain(e, {k: OPTION_KEYS[k] for k in given if k in OPTION_KEYS}),
                                 param_hint="an option" if from_options or not config_path
                                 else f"--config {config_path}") from None


def _sandbox_or_refuse(cfg) -> None:
    from .sandbox import available
    why = available((cfg.cache_dir,))
    if cfg.hardening.sandbox == "on" and why is not None:
        raise click.ClickException(f"the sandbox is required and unavailable here: {why}")


# set by entry(), the `harness` command itself (tests invoke `main` in their own process)
_exit_fast = False


def entry() -> None:
    """The `harness` command. A batch ends without the interpreter's teardown (os._exit once its
    output is flushed): the records, summary and leaderboard are written and closed and every child
    has ended by then, and unloading torch took 0.5-1 s of the command's wall time."""
    global _exit_fast
    _exit_fast = True
    try:
        main()
    except Exception:  # noqa: BLE001 - click handled every user error: this is the harness's own
        import traceback
        traceback.print_exc()
        sys.stderr.write("harness: internal error (exit code 3)\n")
        sys.stderr.flush()
        sys.exit(EXIT_HARNESS)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
def main() -> None:
    """Evaluate machine-written GPU kernels against KernelBench-format problems."""


@main.command("help", short_help="Show the help of a command: harness help batch.")
@click.argument("command", nargs=-1)
@click.pass_context
def help_cmd(ctx, command) -> None:
    """The help of COMMAND (`harness help problems check`), or the list of commands."""
    group, here = main, ctx.parent
    for name in command:
        sub = group.get_command(here, name) if isinstance(group, click.Group) else None
        if sub is None:
            raise UsageFailed(f"no command {' '.join(command)!r}: `harness help` lists them")
        here = click.Context(sub, info_name=name, parent=here)
        group = sub
    click.echo(group.get_help(here))


@main.command("eval", short_help="Score one solution against its problem.")
@click.argument("solution", type=click.Path(exists=True, dir_okay=False))
@click.option("--problem", "-p", required=True, help="Problem name under problems/ (or --problems), KernelBench id, or path.")
@click.option("--problems", "problems_dir", multiple=True, type=click.Path(exists=True), help="Folder(s) to find problems in.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None)
@click.option("--size", type=click.Choice(["auto", "full", "small"]), default=None, help="Problem size preset.")
@click.option("--dtype", type=click.Choice(["auto", "fp32", "fp16", "bf16"]), default=None)
@click.option("--trials", type=int, default=None, help="Correctness trials (fresh inputs each).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--require-sandbox", is_flag=True,
              help="Refuse to run unless solution code runs as a uid of its own ([hardening] sandbox = \"on\").")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON record on stdout.")
def eval_cmd(solution, problem, problems_dir, device, size, dtype, trials, config_path, require_sandbox, as_json):
    """Evaluate one SOLUTION (.py with ModelNew, or a raw .md/.txt response) on one problem."""
    from .evaluation import DeviceUnavailable, evaluate, resolve_device
    from .problems import find_problem
    from .report import print_result

    cfg = _config(config_path, device=device, size=size, dtype=dtype, **{"correctness.trials": trials},
                  **{"hardening.sandbox": "on" if require_sandbox else None})
    _sandbox_or_refuse(cfg)
    try:
        prob = find_problem(problem, list(problems_dir) or None)
        resolve_device(cfg)
    except (LookupError, DeviceUnavailable) as e:
        raise UsageFailed(str(e)) from None
    err = _console()
    from .reference import ReferenceError as ProblemFailed
    try:
        with err.status(f"evaluating {solution} on {prob.name}"):
            result = evaluate(solution, prob, cfg)
    except ProblemFailed as e:  # the problem is broken: no verdict for the solution
        raise HarnessFailed(str(e)) from None
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        print_result(result, _console(stderr=False))
    sys.stdout.flush()
    sys.exit(EXIT_PASSED if result.status.value == "passed" else EXIT_VERDICT)


@main.group("problems", short_help="List and lint problems.")
def problems_group() -> None:
    """List and lint problems."""


def _problem_set(names, problems_dir):
    from .problems import discover, find_problem
    roots = list(problems_dir) or None
    if names:
        return [find_problem(n, roots) for n in names]
    return discover(roots)


@problems_group.command("list", short_help="List problems with sizes and FLOPs.")
@click.option("--problems", "problems_dir", multiple=True, type=click.Path(exists=True))
@click.option("--level", type=int, default=None)
@click.option("--filter", "text", default=None, help="Substring of the name.")
@click.option("--size", type=click.Choice(["full", "small"]), default="full", show_default=True,
              help="small: the CPU preset, which an evaluation on the CPU runs by default.")
@click.option("--json", "as_json", is_flag=True)
def problems_list(problems_dir, level, text, size, as_json):
    """Problems with their level, input shapes, FLOPs and bytes (computed on meta tensors)."""
    import json

    from .catalog import describe, level_of

    rows = []
    for p in _problem_set((), problems_dir):
        if text and text.lower() not in p.name.lower():
            continue
        if level is not None and level_of(p) != level:
            continue
        try:
            rows.append(describe(p, size))
        except Exception as e:  # noqa: BLE001 - a broken problem is listed as such
            rows.append({"name": p.name, "path": str(p.path), "level": level_of(p), "error": f"{type(e).__name__}: {e}"})
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    from rich.table import Table
    out = _console(stderr=False)
    t = Table(title=f"{len(rows)} problems, {size} size" + (" (the CPU preset)" if size == "small" else ""))
    for col in ("name", "level", "inputs", "GFLOP", "MB"):
        # names whole, always: they are what --problem takes
        t.add_column(col, justify="right" if col in ("GFLOP", "MB") else "left", no_wrap=col == "name",
                     min_width=max((len(r["name"]) for r in rows), default=4) if col == "name" else None)
    for r in rows:
        if "error" in r:
            t.add_row(r["name"], str(r["level"]), f"[red]{r['error']}[/]", "", "")
            continue
        t.add_row(r["name"], str(r["level"]), ", ".join(r["inputs"]),
                  "-" if r["flops"] is None else f"{r['flops'] / 1e9:.1f}",
                  "-" if r["bytes"] is None else f"{r['bytes'] / 1e6:.1f}")
    if not out.is_terminal:  # piped: as wide as the rows need, nothing cut
        from .leaderboard import wide
        out = wide(out)
    out.print(t)


@problems_group.command("check", short_help="Lint problems for degenerate outputs.")
@click.argument("names", nargs=-1)
@click.option("--problems", "problems_dir", multiple=True, type=click.Path(exists=True))
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None)
@click.option("--size", type=click.Choice(["auto", "full", "small"]), default=None)
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--jobs", "-j", type=int, default=1, help="Problems checked at once (each in its own worker).")
@click.option("--json", "as_json", is_flag=True)
def problems_check(names, problems_dir, device, size, config_path, jobs, as_json):
    """Lint problems: flag outputs that are nearly constant, independent of the inputs or weights, or
    within tolerance of zero. Exits non-zero when any problem is flagged."""
    import json

    from .evaluation import resolve_device, resolve_size
    from .lint import lint_problem

    cfg = _config(config_path, device=device, size=size)
    dev = resolve_device(cfg)
    sz = resolve_size(cfg, dev)
    try:
        probs = _problem_set(names, problems_dir)
    except LookupError as e:
        raise click.ClickException(str(e)) from None
    from concurrent.futures import ThreadPoolExecutor

    err = _console()
    reports = []
    with ThreadPoolExecutor(max(1, jobs)) as pool, err.status(f"checking {len(probs)} problems"):
        for r in pool.map(lambda p: lint_problem(p, cfg, dev, sz), probs):
            reports.append(r)
            if not as_json:
                mark = "[green]ok[/]" if not r["flags"] else "[red]" + ", ".join(r["flags"]) + "[/]"
                err.print(f"{r['problem']}: {mark}" + "".join(f"\n    {k}: {v}" for k, v in r["notes"].items()))
    if as_json:
        sys.stdout.write(json.dumps(reports) + "\n")
    flagged = [r for r in reports if r["flags"]]
    if not as_json:
        err.print(f"{len(reports)} checked, {len(flagged)} flagged")
    sys.exit(1 if flagged else 0)


@main.command("batch", short_help="Score a folder of solutions into a run folder.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--problem", "-p", default=None, help="Evaluate every solution on this problem.")
@click.option("--problems", "problems_dir", multiple=True, type=click.Path(exists=True),
              help="Folder(s) to find problems in (default: problems/).")
@click.option("--out", default=None, help="Run directory (default: results/<timestamp>).")
@click.option("--resume", is_flag=True, help="Finish the run in --out: skip items that already have a record.")
@click.option("--label", default=None, help="Submitter label for every solution (default: top folder under PATH).")
@click.option("--gpus", default=None, help="GPU indices to use, e.g. 0,1 (default: all).")
@click.option("--compile-workers", type=int, default=None,
              help="Parallel builds (default: one per core; builds run at idle priority).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None)
@click.option("--require-sandbox", is_flag=True,
              help="Refuse to run unless solution code runs as a uid of its own ([hardening] sandbox = \"on\").")
@click.option("--json", "as_json", is_flag=True, help="Print the per-label summary as JSON on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No line per finished solution (its verdict, and why it failed).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where builds and evaluations run: this process's pools, or Ray (docs/cluster.md).")
@click.option("--address", default=None, help="With --backend ray: the cluster to join (default: a local Ray).")
def batch_cmd(paths, problem, problems_dir, out, resume, label, gpus, compile_workers, config_path, device,
              require_sandbox, as_json, quiet, backend, address):
    """Evaluate every solution under PATH... (files or folders of .py/.md/.txt): builds on all cores,
    evaluations on every GPU, one EvalResult per line in RUN/results.jsonl as each finishes."""
    import faulthandler
    import os
    import signal

    from .batch.plan import BatchError
    from .batch.run import kill_children, run_batch

    # `kill -USR1 <pid>`: every thread's stack on stderr, for a batch that seems to stand still
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    if resume and not out:
        raise click.UsageError("--resume needs --out RUN")
    cfg = _config(config_path, device=device, **{"hardening.sandbox": "on" if require_sandbox else None})
    _sandbox_or_refuse(cfg)
    try:
        summary = run_batch(list(paths), cfg, problem=problem, problem_roots=list(problems_dir) or None, out=out,
                            resume=resume, label=label, gpus=gpus, compile_workers=compile_workers,
                            console=_console(), quiet=quiet, backend=backend, address=address)
    except BatchError as e:  # nothing to run, a run folder in use: the user's to fix
        raise UsageFailed(str(e)) from None
    except KeyboardInterrupt:
        # in-flight evaluations are abandoned (their workers killed); threads are not waited for
        kill_children()
        sys.stderr.flush()
        os._exit(130)
    if as_json:
        from .leaderboard import label_summary, load_records, summary_json
        df = load_records([summary.run_dir], signed_only=True)
        sys.stdout.write((summary_json(label_summary(df)) if not df.empty else "[]") + "\n")
    # a run's verdicts, failing ones included, are its results: 0 once every matched item has its
    # record; 3 where items were left without one (a problem that failed, an internal error) or the
    # run was interrupted (--resume finishes it). Files that match no problem are reported, not counted.
    lost = [s for s in summary.skipped if s.problem is not None]
    code = EXIT_HARNESS if lost or summary.interrupted else EXIT_PASSED
    sys.stdout.flush()
    sys.stderr.flush()
    if _exit_fast:
        os._exit(code)
    sys.exit(code)


@main.command("compare", short_help="Compare two runs' speedups per problem.")
@click.argument("run_a", type=click.Path(exists=True))
@click.argument("run_b", type=click.Path(exists=True))
@click.option("--label-a", default=None, help="Only this label's records of RUN_A.")
@click.option("--label-b", default=None, help="Only this label's records of RUN_B (the same run twice compares two labels).")
@click.option("--csv", "csv_path", default=None, help="Write the per-problem rows here.")
@click.option("--markdown", "md_path", default=None, help="Write the table and its summary as Markdown.")
@click.option("--html", "html_path", default=None, help="Write the table and its summary as a self-contained page.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary and the rows as JSON instead of a table.")
@click.option("--signed-only", is_flag=True, help="Only records this machine's harness signed.")
def compare_cmd(run_a, run_b, label_a, label_b, csv_path, md_path, html_path, as_json, signed_only):
    """Compare RUN_B against RUN_A per problem: both best speedups with their intervals, B/A, and
    whether B is faster or slower beyond noise (intervals apart) or within it."""
    import json
    from pathlib import Path

    from .compare import compare, html, markdown, render, summary

    try:
        cmp = compare(run_a, run_b, label_a, label_b, signed_only=signed_only)
    except (FileNotFoundError, LookupError) as e:
        raise UsageFailed(str(e)) from None
    if csv_path:
        from .leaderboard import for_csv
        Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
        for_csv(cmp).to_csv(csv_path, index=False)
    names = (run_a + (f" ({label_a})" if label_a else ""), run_b + (f" ({label_b})" if label_b else ""))
    for path, page in ((md_path, markdown), (html_path, html)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(page(cmp, *names))
    if as_json:
        rows = json.loads(cmp.to_json(orient="records"))
        sys.stdout.write(json.dumps({"summary": summary(cmp), "problems": rows}) + "\n")
        return
    render(cmp, _console(stderr=False), title=f"B: {run_b}{f' ({label_b})' if label_b else ''}  against  "
                                              f"A: {run_a}{f' ({label_a})' if label_a else ''}")


@main.command("leaderboard", short_help="Merge runs into one leaderboard.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--csv", "csv_path", default=None, help="Write the (label, problem) rows here, and the per-label "
              "summary beside it as <stem>_summary.csv.")
@click.option("--markdown", "md_path", default=None, help="Write both tables as Markdown.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-label summary as JSON instead of tables.")
@click.option("--signed-only", is_flag=True, help="Only records this machine's harness signed (its key: "
              "~/.cache/harness-private/record.key); others, forged or from elsewhere, are left out.")
def leaderboard_cmd(runs, csv_path, md_path, as_json, signed_only):
    """Merge runs' results.jsonl (RUN folders or files) into per-problem and per-label tables."""
    from pathlib import Path

    from .leaderboard import (label_summary, load_records, markdown, per_problem, render_problems, render_summary,
                              summary_json, warn_mixed, write_csv)

    try:
        df = load_records(runs, signed_only=signed_only)
    except FileNotFoundError as e:
        raise UsageFailed(str(e)) from None
    if df.empty:
        raise click.ClickException("no records in " + ", ".join(runs))
    warn_mixed(df, _console())
    pp, summary = per_problem(df), label_summary(df)
    if csv_path:
        write_csv(pp, summary, csv_path)
    if md_path:
        Path(md_path).parent.mkdir(parents=True, exist_ok=True)
        Path(md_path).write_text(markdown(pp, summary, list(runs)))
    if as_json:
        sys.stdout.write(summary_json(summary) + "\n")
        return
    out = _console(stderr=False)
    render_problems(pp, out, title=f"{len(df)} records, {df.problem.nunique()} problems, {len(runs)} run(s)")
    render_summary(summary, out, title="per label")


@main.command("report", short_help="Write report.md and report.html for runs.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "out_dir", default=None,
              help="Folder for report.md and report.html (default: the run's own folder; needed for several runs).")
@click.option("--all-records", is_flag=True, help="Also records this machine's harness did not sign (by default "
              "they are left out, as in a batch's own tables).")
def report_cmd(runs, out_dir, all_records):
    """Write report.md and a self-contained report.html (tables, plots, the machines' fingerprints) for
    one run or several merged; a batch writes them into its run folder itself."""
    from pathlib import Path

    from .runreport import write
    if out_dir is None:
        if len(runs) > 1:
            raise UsageFailed("several runs: say where their merged report goes with --out DIR")
        out_dir = Path(runs[0]) if Path(runs[0]).is_dir() else Path(runs[0]).parent
    try:
        made = write(list(runs), out_dir, signed_only=not all_records)
    except FileNotFoundError as e:
        raise UsageFailed(str(e)) from None
    if made is None:
        raise click.ClickException("no records in " + ", ".join(runs)
                                   + ("" if all_records else " signed by this machine's harness (--all-records: any)"))
    _console().print(f"wrote {made[0]} and {made[1]}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    entry()
