"""A run's report (harness/runreport.py): report.md with its plots beside it, report.html with
everything inline, made by a batch and by `harness report`; the page opened in headless Chromium."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from test_leaderboard import rec, write_run

PROBLEMS = [f"level1/{i}_Problem_{i}" for i in range(1, 7)]


def hand_run(tmp_path: Path) -> Path:
    recs = [rec("model-a", p, "passed", 0.6 + 0.4 * i, speedup_ci=(0.55 + 0.4 * i, 0.7 + 0.4 * i))
            for i, p in enumerate(PROBLEMS[:4])]
    recs += [rec("model-a", PROBLEMS[4], "incorrect", error="trial 0 (default): 5 of 64 values outside\nmore"),
             rec("model-a", PROBLEMS[5], "compile_error")]
    recs += [rec("model-b", p, "passed", 1.1) for p in PROBLEMS[:2]] + [rec("model-b", PROBLEMS[2], "timeout")]
    run = write_run(tmp_path / "run", recs)
    (run / "env.json").write_text('{"torch": "2.13.0", "torch_cuda": null, "harness": "0.1.0", "host": "box", '
                                  '"device": "cpu", "cpu": "x86_64", "cpu_count": 2, "python": "3.11", '
                                  '"created": "2026-11-25T20:00:00+00:00", "nvidia_smi": []}')
    return run


def test_the_report_holds_the_tables_the_plots_and_the_fingerprint(tmp_path):
    from harness.runreport import PLOTS, write
    run = hand_run(tmp_path)
    md, page = write([run], run, signed_only=False)
    text, md_text = page.read_text(), md.read_text()
    assert text.count("<svg") == len(PLOTS) == 4 and "<script" not in text and "http" not in text.split("<svg")[0]
    for want in ("model-a", "model-b", "fast_0.5", "1.800x", "incorrect 1", "2.13.0", "box",
                 "Per solution", "5 of 64 values outside") + tuple(PROBLEMS):
        assert want in text and want in md_text, want
    for n in PLOTS:  # the markdown's plots are files beside it
        assert f"report_plots/{n}.svg" in md_text and (run / "report_plots" / f"{n}.svg").stat().st_size > 1000
    # the speedup plot names every problem, those without a passing solution too
    speedups = (run / "report_plots" / "speedups.svg").read_text()
    assert all(p in speedups for p in PROBLEMS)


def test_harness_report_merges_runs_and_says_what_it_needs(tmp_path):
    a = hand_run(tmp_path / "a")
    b = write_run(tmp_path / "b" / "run", [rec("model-c", PROBLEMS[0], "passed", 3.0)])
    cmd = [sys.executable, "-m", "harness.cli", "report"]
    p = subprocess.run(cmd + [str(a), str(b)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "--out" in p.stderr, p.stderr  # several runs: where to?
    p = subprocess.run(cmd + [str(a)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode != 0 and "--all-records" in p.stderr  # hand-made records are not signed
    out = tmp_path / "merged"
    p = subprocess.run(cmd + [str(a), str(b), "--out", str(out), "--all-records"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    page = (out / "report.html").read_text()
    assert "model-c" in page and "model-a" in page and "3.000x" in page


def chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(chromium() is None and not os.environ.get("CI"), reason="no Chromium here (CI installs it)")
def test_the_page_renders_in_headless_chromium(tmp_path):
    """The page as a browser draws it: its DOM after parsing holds the four plots and the tables, and
    the screenshot is not blank (bench/results/report-screenshot.png is one, looked at by hand)."""
    from harness.runreport import write
    browser = chromium()
    assert browser, "CI sets up Chromium (scripts/setup.sh): the page is tested in a real browser"
    run = hand_run(tmp_path)
    _, page = write([run], run, signed_only=False)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'ud'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert len(re.findall(r"<svg\b", dom.stdout)) == 4 and dom.stdout.count("<table") == 4, dom.stdout[:2000]
    shot = tmp_path / "page.png"
    p = subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,2600", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    import matplotlib.image as mpimg
    img = mpimg.imread(shot)
    assert img.shape[0] == 2600 and img.shape[1] == 1200
    assert img[..., :3].std() > 0.05  # not one colour: text, tables and plots were drawn
    keep = os.environ.get("HARNESS_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
