"""The `harness` command: a thin layer over the library. Heavy imports happen inside commands, so
`harness --help` is instant. Records go to stdout (JSON with --json); logs and progress to stderr."""
from __future__ import annotations

import sys
from typing import Optional

import click

from . import __version__


def _console(stderr: bool = True):
    from rich.console import Console
    return Console(stderr=stderr)


def _config(config_path: Optional[str], **overrides):
    from .config import load_config
    return load_config(config_path, {k: v for k, v in overrides.items() if v is not None})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
def main() -> None:
    """Evaluate machine-written GPU kernels against KernelBench-format problems."""


@main.command("eval")
@click.argument("solution", type=click.Path(exists=True, dir_okay=False))
@click.option("--problem", "-p", required=True, help="Problem name under problems/ (or --problems), KernelBench id, or path.")
@click.option("--problems", "problems_dir", multiple=True, type=click.Path(exists=True), help="Folder(s) to find problems in.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None)
@click.option("--size", type=click.Choice(["auto", "full", "small"]), default=None, help="Problem size preset.")
@click.option("--dtype", type=click.Choice(["auto", "fp32", "fp16", "bf16"]), default=None)
@click.option("--trials", type=int, default=None, help="Correctness trials (fresh inputs each).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON record on stdout.")
def eval_cmd(solution, problem, problems_dir, device, size, dtype, trials, config_path, as_json):
    """Evaluate one SOLUTION (.py with ModelNew, or a raw .md/.txt response) on one problem."""
    from .evaluation import evaluate
    from .problems import find_problem
    from .report import print_result

    cfg = _config(config_path, device=device, size=size, dtype=dtype, **{"correctness.trials": trials})
    try:
        prob = find_problem(problem, list(problems_dir) or None)
    except LookupError as e:
        raise click.ClickException(str(e)) from None
    err = _console()
    with err.status(f"evaluating {solution} on {prob.name}"):
        result = evaluate(solution, prob, cfg)
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        print_result(result, _console(stderr=False))


if __name__ == "__main__":
    main()
