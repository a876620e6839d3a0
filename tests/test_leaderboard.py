"""harness/leaderboard.py: fast_p and the geomean by hand, and `harness leaderboard` merging two runs,
from hand-made records."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT


def rec(label, problem, status, speedup=None, solution=None, **kw):
    from harness.records.result import EvalResult
    return EvalResult(label=label, problem=problem, status=status, speedup=speedup,
                      runtime_ms=(1.0 / speedup if speedup else None), ref_runtime_ms=1.0 if speedup else None,
                      solution=solution or f"{label}/{problem}/{status}-{speedup}.py",
                      solution_hash=f"h-{label}-{problem}-{status}-{speedup}", config_hash="c", **kw)


def write_run(path: Path, recs) -> Path:
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in recs))
    return path


HAND = [rec("A", "p1", "passed", 2.0), rec("A", "p1", "passed", 0.9), rec("A", "p2", "incorrect"),
        rec("A", "p3", "passed", 1.2), rec("A", "p3", "timeout"),
        rec("B", "p1", "passed", 0.5), rec("B", "p2", "compile_error")]


def test_fast_p_and_geomean_by_hand(tmp_path):
    from harness.leaderboard import label_summary, load_records, per_problem
    df = load_records([write_run(tmp_path / "r", HAND)])
    s = label_summary(df).set_index("label")
    # 3 problems in the run. A: best 2.0 on p1, 1.2 on p3, nothing on p2. B: 0.5 on p1.
    assert s.loc["A", "problems"] == 3 and s.loc["A", "solved"] == 2 and s.loc["B", "attempted"] == 2
    assert [s.loc["A", f"fast_{p:g}"] for p in (0, 0.5, 0.8, 1, 1.5, 2)] == pytest.approx(
        [2 / 3, 2 / 3, 2 / 3, 2 / 3, 1 / 3, 0.0])             # speedup > p, strictly: 2.0 is not > 2
    assert [s.loc["B", f"fast_{p:g}"] for p in (0, 0.5, 0.8, 1, 1.5, 2)] == pytest.approx(
        [1 / 3, 0, 0, 0, 0, 0])
    assert s.loc["A", "geomean_speedup"] == pytest.approx((2.0 * 0.9 * 1.2) ** (1 / 3))  # over passing solutions
    assert s.loc["B", "geomean_speedup"] == pytest.approx(0.5)
    assert (s.loc["A", "passed"], s.loc["A", "incorrect"], s.loc["A", "timeout"]) == (3, 1, 1)
    assert s.loc["B", "compile_error"] == 1
    pp = per_problem(df).set_index(["label", "problem"])
    assert pp.loc[("A", "p1"), "best_speedup"] == 2.0 and pp.loc[("A", "p1"), "runtime_ms"] == pytest.approx(0.5)
    assert pp.loc[("A", "p3"), "status"] == "passed" and pp.loc[("A", "p2"), "status"] == "incorrect"
    assert pp.loc[("B", "p2"), "status"] == "compile_error"


def test_leaderboard_merges_two_runs(tmp_path):
    r1 = write_run(tmp_path / "r1", HAND)
    # the second run: a new label, a new problem, and A's p2 solution fixed and re-run (same hash)
    r2 = write_run(tmp_path / "r2", [rec("C", "p4", "passed", 3.0),
                                     rec("A", "p2", "passed", 1.1, solution="A/p2/incorrect-None.py")
                                     .model_copy(update={"solution_hash": "h-A-p2-incorrect-None"})])
    p = subprocess.run([sys.executable, "-m", "harness.cli", "leaderboard", str(r1), str(r2), "--csv",
                        str(tmp_path / "lb.csv"), "--markdown", str(tmp_path / "lb.md")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "p4" in p.stdout and "fast_1.5" in p.stdout  # rich tables on stdout
    lb = pd.read_csv(tmp_path / "lb.csv").set_index(["label", "problem"])
    assert len(lb) == 6 and lb.loc[("C", "p4"), "best_speedup"] == 3.0
    assert lb.loc[("A", "p2"), "status"] == "passed" and lb.loc[("A", "p2"), "solutions"] == 1  # the later run stands
    s = pd.read_csv(tmp_path / "lb_summary.csv").set_index("label")
    assert (s["problems"] == 4).all()                        # p1..p4 across both runs
    assert s.loc["A", "fast_1"] == pytest.approx(3 / 4)       # 2.0, 1.1, 1.2 over 4 problems
    assert s.loc["C", "fast_2"] == pytest.approx(1 / 4)
    md = (tmp_path / "lb.md").read_text()
    assert "| label | solved |" in md and "| C | p4 | passed |" in md


# --------------------------------------------------------------------------------------------------


def test_signed_records_stay_whole_and_belong_to_their_run(tmp_path):
    """Records a run's tables count (records/signing.py): a record holding U+2028 (a solution's error
    message) is one line for every reader, so it cannot drop out of the tables (a helper's attack hid
    a failure that way, and a "{}" piece crashed the unsigned reader); a signed line copied from
    another run does not verify in this one."""
    import json

    from harness.batch.runfolder import ResultsFile, read_records
    from harness.leaderboard import load_records
    from harness.records.result import EvalResult, Status

    def run(name, rid):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"run_id": rid}))
        return d, ResultsFile(d / "results.jsonl", rid)

    d1, f1 = run("run1", "a" * 32)
    d2, f2 = run("run2", "b" * 32)
    f1.write(EvalResult(problem="p", solution="/s/ok.py", label="L", status=Status.passed, speedup=1.0))
    f1.write(EvalResult(problem="q", solution="/s/bad.py", label="L", status=Status.runtime_error,
                        error="boom\u2028{}\u2029hidden\x85"))
    f2.write(EvalResult(problem="q", solution="/s/bad.py", label="L", status=Status.passed, speedup=9.0))
    for f in (f1, f2):
        f.close()
    with open(d1 / "results.jsonl", "a") as fh:  # run2's signed line replayed into run1
        fh.write((d2 / "results.jsonl").read_text())
    df = load_records([d1], signed_only=True)
    assert sorted(df["status"]) == ["passed", "runtime_error"] and 9.0 not in set(df["speedup"].dropna())
    unsigned = load_records([d1])  # no crash on any piece; the replayed line wins (the last of an item)
    assert 9.0 in set(unsigned["speedup"].dropna())
    recs, passed_over = read_records(d1 / "results.jsonl", signed_only=True, run_id="a" * 32)
    assert len(recs) == 2 and passed_over == 1


def test_a_problem_whose_solutions_all_need_missing_hardware_is_out_of_solved_and_fast_p(tmp_path):
    """`unsupported` (CUDA solutions on a CPU machine) says nothing of the solution: such a problem is
    no failure of its label, and leaves the label's denominators (the README's first command on a
    machine without a GPU reported `solved 1/3` for one runnable solution out of one)."""
    from harness.leaderboard import label_summary, load_records
    recs = [rec("A", "p1", "passed", 1.5), rec("A", "p2", "unsupported"), rec("A", "p3", "unsupported"),
            rec("A", "p4", "unsupported"), rec("A", "p4", "incorrect"),  # p4: one it could run, and failed
            rec("B", "p2", "passed", 3.0)]
    s = label_summary(load_records([write_run(tmp_path / "r", recs)])).set_index("label")
    assert s.loc["A", "unsupported_problems"] == 2 and s.loc["A", "problems"] == 2 and s.loc["A", "solved"] == 1
    assert s.loc["A", "fast_1"] == pytest.approx(0.5) and s.loc["A", "unsupported"] == 3
    assert s.loc["B", "problems"] == 4 and s.loc["B", "fast_1"] == pytest.approx(0.25)


def test_the_csv_has_rounded_numbers_and_paths_relative_to_where_it_was_made(tmp_path, monkeypatch):
    from harness.leaderboard import label_summary, load_records, per_problem, write_csv
    monkeypatch.chdir(tmp_path)
    recs = [rec("A", "p1", "passed", 1.0 / 3.0, solution=str(tmp_path / "subs" / "a.py")),
            rec("A", "p2", "passed", 2.0, solution="/elsewhere/b.py")]
    df = load_records([write_run(tmp_path / "r", recs)])
    path, spath = write_csv(per_problem(df), label_summary(df), tmp_path / "board.csv")
    rows = pd.read_csv(path).set_index("problem")
    assert rows.loc["p1", "best_solution"] == "subs/a.py" and rows.loc["p2", "best_solution"] == "/elsewhere/b.py"
    assert "0.3333," in path.read_text() and "0.33333333" not in path.read_text()
    assert "0.3333333" not in spath.read_text()


def test_the_csv_is_written_when_nothing_passed(tmp_path):
    """No time in any record (nothing passed, or every solution `unsupported`): the columns are
    empty, not a reason to fail (the batch exited 3 and wrote no leaderboard.csv: a helper's find)."""
    from harness.leaderboard import label_summary, load_records, per_problem, write_csv
    df = load_records([write_run(tmp_path / "r", [rec("A", "p1", "unsupported"), rec("A", "p2", "incorrect")])])
    path, spath = write_csv(per_problem(df), label_summary(df), tmp_path / "board.csv")
    assert len(pd.read_csv(path)) == 2 and len(pd.read_csv(spath)) == 1


def test_compare_two_runs_per_problem_with_intervals(tmp_path):
    """`harness compare A B`: per problem both best speedups, B/A, and whether B differs beyond noise
    (intervals apart) or within it; a problem only one side passed, or only one side has, is listed."""
    import json as _json
    a = write_run(tmp_path / "a", [rec("m", "p1", "passed", 1.0, speedup_ci=(0.98, 1.02)),
                                   rec("m", "p2", "passed", 2.0, speedup_ci=(1.9, 2.1)),
                                   rec("m", "p3", "passed", 1.5, speedup_ci=(1.4, 1.6)),
                                   rec("m", "p4", "incorrect")])
    b = write_run(tmp_path / "b", [rec("m", "p1", "passed", 1.5, speedup_ci=(1.45, 1.55)),
                                   rec("m", "p2", "passed", 1.0, speedup_ci=(0.95, 1.05)),
                                   rec("m", "p3", "passed", 1.55, speedup_ci=(1.45, 1.65)),
                                   rec("m", "p4", "passed", 1.1, speedup_ci=(1.0, 1.2)),
                                   rec("m", "p5", "timeout")])
    from harness.compare import compare, summary
    c = compare(a, b).set_index("problem")
    assert c.loc["p1", "difference"] == "faster" and c.loc["p1", "ratio"] == pytest.approx(1.5)
    assert c.loc["p2", "difference"] == "slower" and c.loc["p3", "difference"] == "within noise"
    assert c.loc["p4", "status_a"] == "incorrect" and pd.isna(c.loc["p4", "ratio"])
    assert pd.isna(c.loc["p5", "status_a"]) and c.loc["p5", "status_b"] == "timeout"
    s = summary(c.reset_index())
    assert (s["both_passed"], s["faster"], s["slower"], s["within_noise"], s["only_b_passed"]) == (3, 1, 1, 1, 1)
    assert s["geomean_ratio"] == pytest.approx((1.5 * 0.5 * (1.55 / 1.5)) ** (1 / 3))
    p = subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(a), str(b), "--json",
                        "--markdown", str(tmp_path / "cmp.md"), "--csv", str(tmp_path / "cmp.csv"),
                        "--html", str(tmp_path / "cmp.html")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = _json.loads(p.stdout)
    assert out["summary"]["faster"] == 1 and len(out["problems"]) == 5
    assert "B faster on 1, slower on 1, within noise on 1" in (tmp_path / "cmp.md").read_text()
    assert len(pd.read_csv(tmp_path / "cmp.csv")) == 5
    page = (tmp_path / "cmp.html").read_text()
    assert page.count("<tr>") == 6 and "1.450-1.550" in page and "B faster on 1" in page and "<script" not in page
    table = subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(a), str(b)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "within noise" in table.stdout and "1.450-1.550" in table.stdout, table.stdout


def test_compare_calls_one_code_the_same_and_says_where_the_sides_were_measured_apart(tmp_path):
    """One solution scored in two runs read 0.172x [0.159-0.182] and 0.134x [0.127-0.143] on a 2-core
    machine (a new user's trial): compare said B slower. The same code is "same code"; sides measured
    with other configs or hardware are named in the summary, and every exported table carries them."""
    from harness.compare import compare, summary, summary_line
    from harness.leaderboard import label_summary, load_records, markdown, per_problem
    from harness.records.result import EnvInfo
    env = EnvInfo(device="cpu", torch="2.13.0", python="3.11", harness="x", hostname="h", cpu="Xeon")
    a_rec = rec("m", "p1", "passed", 0.172, speedup_ci=(0.159, 0.182), env=env)
    b_rec = rec("m", "p1", "passed", 0.134, speedup_ci=(0.127, 0.143), env=env)
    a = write_run(tmp_path / "a", [a_rec.model_copy(update={"solution_hash": "same"})])
    b = write_run(tmp_path / "b", [b_rec.model_copy(update={"solution_hash": "same", "config_hash": "d"})])
    c = compare(a, b)
    assert c.loc[0, "difference"] == "same code"
    s = summary(c)
    assert s["slower"] == 0 and s["same_code"] == 1 and s["mismatched"] == {"config_hash": [["c"], ["d"]]}
    assert "the same code on 1" in summary_line(s) and "config_hash c (A) against d (B)" in summary_line(s)
    df = load_records([a, b])
    pp = per_problem(df)
    assert {"device", "gpu", "torch", "config_hash"} <= set(pp.columns) and pp.loc[0, "torch"] == "2.13.0"
    assert label_summary(df).loc[0, "config_hash"] == "c;d"
    assert "Measured on: " in markdown(pp, label_summary(df), [str(a), str(b)]) and "Xeon" in markdown(pp, label_summary(df), [str(a)])


def test_tables_fit_an_80_column_terminal_and_cut_nothing(tmp_path):
    """On a narrow terminal the per-label table keeps KernelBench's headline fast_p and wraps the
    statuses; the per-problem table keeps each problem's whole name (folded where longer than the
    room left) and its best speedup. Piped, both stay wide (160 columns)."""
    import io

    from rich.console import Console

    from harness.leaderboard import label_summary, load_records, per_problem, render_problems, render_summary
    names = ["level2/13_ConvTranspose3d_Mean_Add_Softmax_Tanh_Scaling", "level1/4_Matrix_vector_multiplication_"]
    recs = [rec(lb, n, "passed", 1.25 + i) for i, n in enumerate(names) for lb in ("model-alpha", "model-beta")]
    recs += [rec("model-alpha", names[0], s) for s in ("incorrect", "compile_error", "runtime_error", "timeout")]
    df = load_records([write_run(tmp_path / "r", recs)])
    for piped in (False, True):
        buf = io.StringIO()
        console = Console(file=buf, width=80, force_terminal=not piped, color_system=None)
        render_summary(label_summary(df), console)
        render_problems(per_problem(df), console)
        text = buf.getvalue()
        lines = text.splitlines()
        if piped:
            assert max(map(len, lines)) > 100 and all(n in text for n in names) and "fast_0.5" in text
            continue
        assert max(map(len, lines)) <= 80, "\n".join(lines)
        # a wrapped cell is whole once the table's padding and rules are gone
        flat = re.sub(r"[\s│┃]", "", text)
        head = next(i for i, line in enumerate(lines) if " problem " in line)
        c0, c1 = lines[head].index(" problem ") + 1, lines[head].index(" status ")
        column = "".join(line[c0:c1].strip() for line in lines[head + 2:])  # folded names, rejoined
        for n in names:
            assert n in column, (n, text)
        for cell in ["1.250x", "2.250x", "fast_0", "fast_1", "fast_2", "model-alpha", "1/5",
                             "passed2,incorrect1,timeout1,runtime_error1,compile_error1"]:
            assert cell in flat, (cell, text)


def test_a_best_speedup_in_question_is_marked_with_its_flags_and_size(tmp_path):
    """A new user's leaderboard put a plain PyTorch solution timed beside a busy reference
    (`reference_contended`: its speedup inflated) at the top, and no table said so. The per-problem
    rows carry the best solution's size and flags; a flag that puts the speedup in question marks it,
    in the tables, the Markdown, the CSV and the report."""
    from harness import runreport
    from harness.leaderboard import markdown, per_problem, label_summary, load_records
    run = write_run(tmp_path / "r", [rec("A", "p1", "passed", 1.5, flags=["no_custom_kernel", "reference_contended"], size="small"),
                                     rec("A", "p1", "passed", 1.2, size="small"),
                                     rec("A", "p2", "passed", 1.1, flags=["short_kernel"], size="full")])
    df = load_records([run])
    pp = per_problem(df).set_index("problem")
    assert pp.loc["p1", "flags"] == "no_custom_kernel,reference_contended" and pp.loc["p1", "size"] == "small"
    md = markdown(per_problem(df), label_summary(df), [str(run)])
    p1 = next(line for line in md.splitlines() if "| p1 |" in line)
    p2 = next(line for line in md.splitlines() if "| p2 |" in line)
    assert "1.500x*" in p1 and "reference_contended" in p1 and "| small |" in p1
    assert "1.100x |" in p2 and "short_kernel" in p2 and "| full |" in p2  # informational: not marked
    assert "flag that puts it in question" in md
    out = subprocess.run([sys.executable, "-m", "harness.cli", "leaderboard", str(run), "--csv", str(tmp_path / "lb.csv")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    csv = pd.read_csv(tmp_path / "lb.csv").set_index("problem")
    assert csv.loc["p1", "flags"] == "no_custom_kernel,reference_contended" and csv.loc["p2", "size"] == "full"
    assert "1.500x*" in out.stdout
    md_path, html_path = runreport.write([run], tmp_path / "report", signed_only=False)
    report = md_path.read_text()
    assert "1.500x*" in report and "| small | no_custom_kernel, reference_contended |" in report
    assert "flag that puts it in question" in html_path.read_text()
