"""`harness batch`: matching, labels, records and the run's leaderboard, resume after a crash, the
scheduler and the compile plan. CPU only; pure-PyTorch solutions except one tiny C++ one (the
honest_cpp fixture, whose build the verdict tests share through the test cache). The leaderboard's
aggregation from hand-made records is pinned in test_leaderboard.py, GPU discovery in
test_devices.py."""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pandas as pd
import pytest

import conftest
from conftest import CACHE, ROOT

PROBLEMS = ROOT / "tests" / "problems"
CONFIG = getattr(conftest, "make_config", None) or getattr(conftest, "test_config")

GOOD = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        return {}\n")
ZEROS = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
         "        return torch.zeros_like(x)\n")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cli_config(tmp: Path) -> Path:
    return write(tmp / "batch.toml", f'cache_dir = "{CACHE}"\n[timing]\nbudget_s = 0.3\nmax_calls = 20\n'
                                     "round_calls = 5\nmin_rounds = 3\n[correctness]\ntrials = 2\n"
                                     # two evaluations at once on the CPU slot: the shared-slot path, end to end
                                     "[batch]\ncpu_concurrent_evaluations = 2\n")


def batch(*args, cfg: Path, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "harness.cli", "batch", *map(str, args), "--config", str(cfg),
                           "--device", "cpu", "--compile-workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------------------------------
# End to end, through the command line

def test_batch_labels_problem_folders_and_unmatched(tmp_path):
    subs = tmp_path / "subs"
    write(subs / "modelA/relu_add/good.py", GOOD.format("torch.relu(a + b)"))
    write(subs / "modelA/relu_add/wrong.py", GOOD.format("torch.relu(a - b)"))
    shutil.copy(ROOT / "tests/fixtures/cpu/honest_cpp.py", subs / "modelA/relu_add/cpp_good.py")
    write(subs / "modelB/softmax_wide/zeros.py", ZEROS)
    write(subs / "modelB/softmax_wide/broken.py", "import torch\nclass ModelNew(:\n")
    write(subs / "modelB/notes/stray.py", "print('not a solution of anything')\n")
    run = tmp_path / "run"
    p = batch(subs, "--problems", PROBLEMS, "--out", run, "--json", cfg=cli_config(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]

    # the unmatched file is reported, with the rules, and the batch went on
    assert "stray.py" in p.stderr and "matches no problem" in p.stderr and "--problem" in p.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [Path(s["solution"]).name for s in summary["skipped"]] == ["stray.py"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "skipped" and e["solution"].endswith("stray.py") for e in events)

    recs = {Path(r["solution"]).name: r for r in records(run)}
    assert sorted(recs) == ["broken.py", "cpp_good.py", "good.py", "wrong.py", "zeros.py"]
    expect = {"good.py": ("passed", "modelA", "relu_add"), "cpp_good.py": ("passed", "modelA", "relu_add"),
              "wrong.py": ("incorrect", "modelA", "relu_add"), "zeros.py": ("incorrect", "modelB", "softmax_wide"),
              "broken.py": ("compile_error", "modelB", "softmax_wide")}
    for name, (status, label, problem) in expect.items():
        r = recs[name]
        assert (r["status"], r["label"], r["problem"]) == (status, label, problem), (name, r["error"])
        assert r["solution_hash"] and r["problem_hash"] and r["config_hash"] and r["device"] == "cpu"
    # a failed build never reaches the device: no candidate was loaded, no reference environment
    assert recs["broken.py"]["phases"]["load_s"] == 0 and recs["broken.py"]["env"] is None
    ph = recs["good.py"]["phases"]  # a candidate's load, split: its process, then ModelNew built
    assert ph["load_process_s"] > 0 and ph["load_build_s"] > 0
    assert ph["load_process_s"] + ph["load_build_s"] <= ph["load_s"] + 1e-3
    assert {r["slot"] for r in recs.values() if r["status"] != "compile_error"} == {"cpu"}
    assert recs["broken.py"]["phases"]["compile_s"] > 0
    assert (run / "config.json").exists() and json.loads((run / "env.json").read_text())["torch"]

    # leaderboard.csv: one row per (label, problem)
    lb = pd.read_csv(run / "leaderboard.csv")
    rows = {(r.label, r.problem): r for r in lb.itertuples()}
    assert set(rows) == {("modelA", "relu_add"), ("modelB", "softmax_wide")}
    a = rows[("modelA", "relu_add")]
    best = max(recs["good.py"]["speedup"], recs["cpp_good.py"]["speedup"])
    assert a.status == "passed" and a.solutions == 3 and a.passed == 2 and a.best_speedup == pytest.approx(best, abs=5e-5)  # (4 places)
    assert rows[("modelB", "softmax_wide")].status == "incorrect"

    # per-label summary, by hand: 2 problems in the run; modelA solved one of them
    s = pd.read_csv(run / "leaderboard_summary.csv").set_index("label")
    assert s.loc["modelA", "problems"] == 2 and s.loc["modelA", "passed"] == 2
    assert s.loc["modelA", "incorrect"] == 1 and s.loc["modelB", "compile_error"] == 1
    for p_ in (0, 0.5, 0.8, 1, 1.5, 2):
        assert s.loc["modelA", f"fast_{p_:g}"] == pytest.approx((1 if best > p_ else 0) / 2)
        assert s.loc["modelB", f"fast_{p_:g}"] == 0
    geo = math.sqrt(recs["good.py"]["speedup"] * recs["cpp_good.py"]["speedup"])
    assert s.loc["modelA", "geomean_speedup"] == pytest.approx(geo, abs=5e-5)  # (4 places in the CSV)
    assert pd.isna(s.loc["modelB", "geomean_speedup"])

    # --json: the per-label summary, and nothing else, on stdout
    out = p.stdout.strip().splitlines()
    assert len(out) == 1 and {r["label"] for r in json.loads(out[0])} == {"modelA", "modelB"}


def test_kernelbench_layout(tmp_path, monkeypatch):
    from harness.batch import pipeline
    from harness.batch.run import run_batch
    monkeypatch.setattr(pipeline, "HEARTBEAT_S", 0.0)  # an "inflight" event at every turn of the loop

    kb = tmp_path / "kb" / "level1"
    shutil.copy(PROBLEMS / "relu_add.py", write(kb / "1_Relu_Add.py", ""))
    shutil.copy(PROBLEMS / "softmax_wide.py", write(kb / "2_Softmax_Wide.py", ""))
    gen = tmp_path / "gen" / "modelK"
    write(gen / "level_1_problem_1_sample_0_kernel.py", GOOD.format("(a + b).clamp_min(0)"))
    write(gen / "level_1_problem_2_sample_0_kernel.py", ZEROS)
    write(gen / "level_1_problem_2_sample_1_kernel.md", "I could not write this kernel, sorry.\n")
    write(gen / "level_1_problem_7_sample_0_kernel.py", ZEROS)   # no problem 7
    write(gen / "level_2_problem_1_sample_0_kernel.py", ZEROS)   # no level 2
    run = tmp_path / "run"
    # every evaluation counts as stalled at once: each one's stall is reported, with the threads' stacks
    summary = run_batch([str(tmp_path / "gen")], CONFIG(device="cpu", **{"batch.stall_report_s": 1e-3}),
                        problem_roots=[str(tmp_path / "kb")], out=str(run), compile_workers=1)
    recs = {Path(r["solution"]).name: r for r in records(run)}
    assert {k: (v["problem"], v["status"], v["label"]) for k, v in recs.items()} == {
        "level_1_problem_1_sample_0_kernel.py": ("level1/1_Relu_Add", "passed", "modelK"),
        "level_1_problem_2_sample_0_kernel.py": ("level1/2_Softmax_Wide", "incorrect", "modelK"),
        "level_1_problem_2_sample_1_kernel.md": ("level1/2_Softmax_Wide", "no_code", "modelK"),
    }
    skipped = {Path(s.solution).name: s.reason for s in summary.skipped}
    assert set(skipped) == {"level_1_problem_7_sample_0_kernel.py", "level_2_problem_1_sample_0_kernel.py"}
    assert "level 1 problem 7" in skipped["level_1_problem_7_sample_0_kernel.py"]
    assert summary.references == {"cpu": 2}  # one reference per problem, not per solution
    beats = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "inflight"]
    busy = [b for b in beats if b["slots"]["cpu"]]
    assert busy and all(isinstance(b["holds"], list) for b in beats), beats[:3]
    assert all({"admitted", "alone", "gpu_gb", "waited_s"} <= h.keys() for b in beats for h in b["holds"])
    assert any(e[1] == "modelK/level_1_problem_1_sample_0_kernel.py" for b in busy for e in b["slots"]["cpu"]), busy[:3]
    stalls = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "stall"]
    stalled = [i[2] for e in stalls for i in e["items"]]
    assert sorted(stalled) == sorted(set(stalled)) and "modelK/level_1_problem_1_sample_0_kernel.py" in stalled, stalls
    # the evaluating thread is there, in the executor's evaluate()
    assert any("in evaluate" in ln for e in stalls for frames in e["threads"].values() for ln in frames), stalls[0]


def test_resume_after_sigkill(tmp_path):
    subs = tmp_path / "subs" / "modelR" / "relu_add"
    bodies = ["torch.relu(a + b)", "(a + b).clamp_min(0)", "torch.clamp(a + b, min=0)", "torch.relu(b + a)",
              "torch.nn.functional.relu(a + b)", "torch.relu(a - b)"]
    for i, body in enumerate(bodies):
        write(subs / f"s{i}.py", GOOD.format(body))
    cfg, run = cli_config(tmp_path), tmp_path / "run"
    args = [sys.executable, "-m", "harness.cli", "batch", str(tmp_path / "subs"), "--problems", str(PROBLEMS),
            "--out", str(run), "--config", str(cfg), "--device", "cpu", "--compile-workers", "1"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    results = run / "results.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the batch ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    before = records(run)
    assert 1 <= len(before) < len(bodies)
    with open(results, "a") as fh:  # a record torn by the crash: dropped, and its item redone
        fh.write('{"problem": "relu_add", "solution": "')

    p = subprocess.run(args + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    after = records(run)  # every line parses
    names = sorted(Path(r["solution"]).name for r in after)
    assert names == sorted(f"s{i}.py" for i in range(len(bodies))), "exactly one record per item"
    assert {Path(r["solution"]).name: r["status"] for r in after}["s5.py"] == "incorrect"
    assert f"{len(before)} item(s) already have a record" in p.stderr

    # a second resume has nothing left to do
    p = subprocess.run(args + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and len(records(run)) == len(bodies)
    # and without --resume, an existing run is not appended to
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "--resume" in p.stderr


def test_a_second_batch_on_a_run_folder_in_use_is_refused(tmp_path):
    """Two writers on one run folder (a --resume started twice) recorded items twice: while one
    batch holds the folder, another is refused at once and writes nothing; once it is free, the
    same command runs."""
    from harness.batch.runfolder import RunLock
    write(tmp_path / "subs" / "modelL" / "relu_add" / "s0.py", GOOD.format("torch.relu(a + b)"))
    cfg, run = cli_config(tmp_path), tmp_path / "run"
    args = [sys.executable, "-m", "harness.cli", "batch", str(tmp_path / "subs"), "--problems", str(PROBLEMS),
            "--out", str(run), "--config", str(cfg), "--device", "cpu", "--resume"]
    held = RunLock(run)
    try:
        p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert p.returncode != 0 and "another harness batch is writing to" in p.stderr, p.stderr[-2000:]
        assert not (run / "results.jsonl").exists()
    finally:
        held.release()
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(records(run)) == 1
    assert not list(run.glob(".lock*"))  # the folder itself is locked: nothing left behind


def test_a_folder_named_after_a_problem_left_out_of_the_roots_says_where_it_is(tmp_path, monkeypatch):
    """As `harness eval` does: a solution in solutions/relu_add/ with --problems naming folders that
    lack relu_add is skipped with the folder that has it, and the option that would add it."""
    from harness.batch.plan import plan_items
    from harness.problems import discover
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "mine/problems/relu_add.py", (PROBLEMS / "relu_add.py").read_text())
    write(tmp_path / "subs/relu_add/a.py", "x")
    items, skipped = plan_items([tmp_path / "subs"], discover([ROOT / "problems"]), None, None, "problems")
    assert not items and len(skipped) == 1
    assert "a problem file relu_add.py is in mine/problems: add --problems mine/problems" in skipped[0].reason


def test_matching_rules_and_labels(tmp_path):
    from harness.batch.plan import plan_items
    from harness.problems import discover, find_problem
    problems = discover([PROBLEMS]) + discover([ROOT / "problems"])
    subs = tmp_path / "subs"
    write(subs / "m1/relu_add/a.py", "x")                           # folder named after a problem
    write(subs / "m1/level1/24_relu/b.md", "x")                     # a two-part problem name
    write(subs / "m2/level_1_problem_1_sample_0_kernel.py", "x")    # KernelBench name (problems/level1/01_...)
    write(subs / "m2/other/c.txt", "x")                             # nothing
    write(subs / "m2/__pycache__/d.py", "x")                        # ignored
    items, skipped = plan_items([subs], problems, None, None, "roots")
    got = {it.path.name: (it.problem.name, it.label) for it in items}
    assert got["a.py"] == ("relu_add", "m1")
    assert got["b.md"][0] == "level1/24_relu" and got["b.md"][1] == "m1"
    assert got["level_1_problem_1_sample_0_kernel.py"][1] == "m2"
    assert got["level_1_problem_1_sample_0_kernel.py"][0].startswith("level1/01")
    assert [Path(s.solution).name for s in skipped] == ["c.txt"] and "matches no problem" in skipped[0].reason
    # --problem wins over everything; --label over folders; PATH being the problem folder: no label
    fixed = find_problem(PROBLEMS / "softmax_wide.py")
    items, skipped = plan_items([subs], problems, fixed, "L", "roots")
    assert not skipped and {(it.problem.name, it.label) for it in items} == {("softmax_wide", "L")}
    items, _ = plan_items([subs / "m1" / "relu_add"], problems, None, None, "roots")
    assert [(it.problem.name, it.label) for it in items] == [("relu_add", None)]
    # no label folder under PATH (the README's solutions/<problem>/x.py): PATH's own name
    write(subs / "m1" / "notes.txt", "my notes")
    write(subs / "m1" / "scores.csv", "x")
    ignored = []
    items, _ = plan_items([subs / "m1"], problems, None, None, "roots", ignored)
    assert ("relu_add", "m1") in [(it.problem.name, it.label) for it in items]
    assert sorted(f.name for f in ignored) == ["notes.txt", "scores.csv"]  # told of, not dropped silently


class FakeExecutor:
    """Instant outcomes; remembers what ran where."""

    def __init__(self, slots, lose=(), after=1):
        from harness.batch.executor import DeviceSlot
        self.slots = [DeviceSlot(n, "cpu") for n in slots]
        self.compile_workers = 2
        self.evals, self.retired, self.lost = [], [], []
        self.lose_slots, self.after = set(lose), after  # these slots' GPUs go after `after` evaluations

    def submit_compile(self, task):
        from harness.batch.executor import CompileOutcome
        from harness.records.messages import CompileReply
        from harness.records.result import EvalResult
        f = Future()
        if "bad" in task.solution:
            r = EvalResult(problem=task.problem.name, solution=task.solution, status="compile_error",
                           label=task.label)
            f.set_result(CompileOutcome(task.index, record=r, wall_s=0.1))
        else:
            f.set_result(CompileOutcome(task.index, compiled=(CompileReply(ok=True), None, ""), needs_device=True,
                                        wall_s=0.1))
        return f

    def submit_eval(self, task, slot):
        from harness.batch.executor import EvalOutcome
        from harness.records.result import EvalResult
        assert "bad" not in task.solution, "a failed build reached a device"
        assert slot.name not in self.lost, "a lost slot got work"
        self.evals.append((slot.name, task.problem.name))
        f = Future()
        if slot.name in self.lose_slots and sum(s == slot.name for s, _ in self.evals) > self.after:
            f.set_result(EvalOutcome(task.index, slot.name, device_lost="cuInit: CUDA_ERROR_NO_DEVICE",
                                     record=EvalResult(problem=task.problem.name, solution=task.solution,
                                                       status="runtime_error", label=task.label)))
            return f
        f.set_result(EvalOutcome(task.index, slot.name, record=EvalResult(
            problem=task.problem.name, solution=task.solution, status="passed", speedup=1.0, label=task.label,
            slot=slot.name)))
        return f

    def lose(self, slot):
        self.lost.append(slot.name)

    def retire(self, key):
        self.retired.append(Path(key).stem)

    def backgrounded(self, slot):
        return 0

    def shutdown(self, cancel=False):
        pass


def _pipeline(tmp_path, ex, names):
    from rich.console import Console

    from harness.batch.pipeline import BatchSummary, Pipeline
    from harness.batch.plan import Item
    from harness.batch.runfolder import EventLog, ResultsFile
    from harness.problems import discover
    probs = {p.name: p for p in discover([PROBLEMS])}
    items = [Item(i, tmp_path / f"{n}.py", probs[p], "L") for i, (p, n) in enumerate(names)]
    summary = BatchSummary(run_dir=tmp_path)
    res = ResultsFile(tmp_path / "results.jsonl")
    pipe = Pipeline(items, CONFIG(device="cpu"), ex, "cpu", "small", None, res, EventLog(tmp_path / "ev.jsonl"),
                    summary, Console(file=open(os.devnull, "w")), False, {})
    pipe.run()
    res.close()
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    return summary, records(tmp_path), events


def test_pipeline_schedule(tmp_path):
    names = [("relu_add", "x0"), ("relu_add", "x1"), ("relu_add", "bad"), ("relu_add", "x2"),
             ("softmax_wide", "y0"), ("softmax_wide", "y1"), ("softmax_wide", "y2"), ("linear_relu", "z0")]
    ex = FakeExecutor(["g0", "g1"])
    summary, recs, _ = _pipeline(tmp_path, ex, names)
    assert sorted(Path(r["solution"]).stem for r in recs) == sorted(n for _, n in names)
    assert summary.statuses == {"passed": 7, "compile_error": 1}
    assert sorted(ex.retired) == ["linear_relu", "relu_add", "softmax_wide"]  # each once, when done
    for slot in ("g0", "g1"):  # a slot finishes a problem before it moves on: no A, B, A
        seq = [p for s, p in ex.evals if s == slot]
        runs = [p for i, p in enumerate(seq) if i == 0 or seq[i - 1] != p]
        assert len(runs) == len(set(runs)), seq
    assert {p for s, p in ex.evals if s == "g0"} != {p for s, p in ex.evals if s == "g1"}  # both GPUs used


def test_the_problems_that_took_longest_last_time_are_planned_first(tmp_path):
    """With durations kept by an earlier run (memory.KeptNeed.seconds), the longest problem starts
    first, so it does not end the batch alone on one GPU; problems with none keep the plan's order."""
    names = [("relu_add", "x0"), ("softmax_wide", "y0"), ("linear_relu", "z0"), ("relu_add", "x1")]
    kept = {"linear_relu": 30.0, "softmax_wide": 4.0}
    orders = []
    for run, hint in (("a", None), ("b", lambda problem, cache_dir: kept.get(problem.name))):
        (tmp_path / run).mkdir()
        ex = FakeExecutor(["g0"])
        if hint is not None:
            ex.expected_seconds = hint
        _pipeline(tmp_path / run, ex, names)
        orders.append([p for _, p in ex.evals])
    assert orders == [["relu_add", "relu_add", "softmax_wide", "linear_relu"],
                      ["linear_relu", "softmax_wide", "relu_add", "relu_add"]]


def test_a_lost_gpu_moves_its_work_to_the_other_slots(tmp_path):
    """A slot whose GPU no longer answers after a failure (executor.DEVICE_MAY_BE_LOST, health.py)
    gets no more work; the failed evaluation runs again on another slot, and its `runtime_error`
    (the GPU's, not the solution's) is not recorded."""
    names = [(p, f"{p[:4]}{i}") for p in ("relu_add", "softmax_wide", "linear_relu") for i in range(4)]
    ex = FakeExecutor(["g0", "g1"], lose=["g1"], after=1)
    summary, recs, events = _pipeline(tmp_path, ex, names)
    assert len(recs) == len(names) and {r["status"] for r in recs} == {"passed"}
    assert ex.lost == ["g1"] and set(summary.lost_slots) == {"g1"} and summary.moved == 1
    assert [s for s, _ in ex.evals].count("g1") == 2  # one that passed before the loss, one that failed
    assert {r["slot"] for r in recs} == {"g0", "g1"} and sum(r["slot"] == "g1" for r in recs) == 1
    kinds = [e["event"] for e in events]
    assert kinds.count("device_lost") == 1 and kinds.count("moved") == 1
    assert not summary.skipped


def test_with_every_gpu_lost_the_rest_is_skipped_and_the_batch_ends(tmp_path):
    names = [("relu_add", f"r{i}") for i in range(3)] + [("softmax_wide", f"s{i}") for i in range(3)]
    ex = FakeExecutor(["g0", "g1"], lose=["g0", "g1"], after=0)
    summary, recs, _ = _pipeline(tmp_path, ex, names)
    assert set(summary.lost_slots) == {"g0", "g1"} and not recs
    assert len(summary.skipped) == len(names)
    assert all("no device left" in s.reason for s in summary.skipped)


def test_a_gpu_is_taken_for_lost_only_when_the_driver_does_not_answer():
    """health.gpu_lost asks the driver in a fresh process: with no device mapped (CUDA_VISIBLE_DEVICES
    empty) it says why, on any machine; a GPU that answers is checked by the GPU suite."""
    from harness.batch.health import gpu_lost
    why = gpu_lost({"CUDA_VISIBLE_DEVICES": ""})
    assert why and ("CUDA_ERROR_NO_DEVICE" in why or "no CUDA driver" in why or "no device" in why), why


def test_the_fault_injection_takes_a_slots_gpu_away():
    import time

    from harness.batch.executor import DeviceSlot
    from harness.batch.health import schedule_loss

    class Runtime:
        def __init__(self, name):
            self.slot, self.closed = DeviceSlot(name, "cuda", {"CUDA_VISIBLE_DEVICES": name[-1]}), 0

        def close(self):
            self.closed += 1

    rts = {n: Runtime(n) for n in ("cuda:0", "cuda:1")}
    schedule_loss("cuda:1@0.05", rts).join(5)
    time.sleep(0.01)
    assert rts["cuda:1"].slot.env["CUDA_VISIBLE_DEVICES"] == "" and rts["cuda:1"].closed == 1
    assert rts["cuda:0"].slot.env["CUDA_VISIBLE_DEVICES"] == "0" and rts["cuda:0"].closed == 0
    assert schedule_loss(None, rts) is None
    with pytest.raises(ValueError, match="no slot"):
        schedule_loss("cuda:7@1", rts)


def test_an_evaluation_in_the_background_frees_its_lane_up_to_twice_the_lanes():
    """An evaluation in a phase that holds no lane (the profiler's start-up: sharing.DeviceGate.
    background) lets the slot start another beside it, up to twice its lanes in flight."""
    from harness.batch.pipeline import SlotState
    from harness.batch.plan import Item
    from harness.batch.executor import DeviceSlot
    from harness.batch.sharing import DeviceGate
    gate = DeviceGate()
    st = SlotState(DeviceSlot("cuda:0", "cuda", concurrency=2), background=lambda: gate.backgrounded)
    for i in range(2):
        st.start(Item(i, Path(f"s{i}.py"), None, None))
    assert not st.free
    with gate.background():
        assert st.free  # one of the two is in the background
        st.start(Item(2, Path("s2.py"), None, None))
        assert not st.free
        with gate.background(), gate.background():
            st.start(Item(3, Path("s3.py"), None, None))
            assert gate.backgrounded == 3 and not st.free  # four in flight: twice the lanes, the most
    assert gate.backgrounded == 0 and not st.free


def test_a_candidate_phase_that_runs_long_frees_its_lane():
    """A candidate's start or trials still running after `frees_lane_after` seconds (a hang waiting
    out its timeout) counts as backgrounded, so the slot starts another evaluation beside it; a short
    phase never does, and the count falls back as the long one ends."""
    import time

    from harness.batch.pipeline import SlotState
    from harness.batch.plan import Item
    from harness.batch.executor import DeviceSlot
    from harness.batch.sharing import DeviceGate, SoloGate
    gate = DeviceGate()
    st = SlotState(DeviceSlot("cuda:0", "cuda", concurrency=1), background=lambda: gate.backgrounded)
    st.start(Item(0, Path("s0.py"), None, None))
    with gate.stoppable(frees_lane_after=0.05):
        assert not st.free  # a phase that ends in time keeps its lane
    time.sleep(0.1)
    assert gate.backgrounded == 0 and gate.overdue == 0
    with gate.stoppable(frees_lane_after=0.05):
        time.sleep(0.3)
        assert gate.backgrounded == 1 and st.free
        st.start(Item(1, Path("s1.py"), None, None))
        assert not st.free
    assert gate.backgrounded == 0 and gate.overdue == 1
    with gate.stoppable():  # without it: never
        time.sleep(0.1)
        assert gate.backgrounded == 0
    with SoloGate().stoppable(frees_lane_after=0.01):  # one evaluation at a time: nothing to free
        pass


def test_torch_versions_are_read_without_importing_torch():
    """The batch's parent reads torch's versions from its files and imports it on a thread (2-5 s on
    a GPU machine, which came before the batch's start): its modules do not import torch."""
    import subprocess
    import sys
    code = ("import sys, harness.batch.run, harness.evaluation, harness.batch.executor, harness.reference, harness.cli\n"
            "from harness.build import torch_versions\n"
            "v = torch_versions()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "import torch\n"
            "assert v == (str(torch.__version__), torch.version.cuda), v\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


def test_compile_plan_starts_a_build_per_core(monkeypatch):
    """A build per core, two compiler jobs each for a CUDA extension (.cpp and .cu at once; the .cu
    alone most of the time), so the cores stay full. MAX_JOBS and --compile-workers win."""
    from harness.batch.run import compile_plan
    monkeypatch.delenv("MAX_JOBS", raising=False)
    assert compile_plan("cuda", cores=16) == (16, 2)
    assert compile_plan("cpu", cores=2) == (2, 1)
    assert compile_plan("cuda", cores=1) == (1, 2)
    assert compile_plan("cuda", workers=3, cores=16) == (3, 2)
    monkeypatch.setenv("MAX_JOBS", "4")
    assert compile_plan("cuda", cores=16) == (16, 4)


def test_resume_passes_over_records_the_harness_did_not_sign(tmp_path):
    """A solution as the harness's uid (no jail) appends a record of itself to results.jsonl (passed,
    42x, in the harness's format with the right hashes) and kills the batch
    (tests/adversarial/sandbox/forge_record.py). The forged line names its item exactly, so a resume
    that read every line would call that item done; it carries no MAC of the harness's key, so
    --resume passes over it, runs the item again, and its zeros are judged: incorrect. The run's
    leaderboard counts signed records only."""
    from harness.batch.runfolder import read_records, run_id
    subs = tmp_path / "subs" / "m" / "relu_add"
    write(subs / "honest.py", GOOD.format("torch.relu(a + b)"))
    shutil.copy(ROOT / "tests" / "adversarial" / "sandbox" / "forge_record.py", subs / "forge_record.py")
    cfg, run = cli_config(tmp_path), tmp_path / "run"
    cfg.write_text(cfg.read_text().replace("cpu_concurrent_evaluations = 2", "cpu_concurrent_evaluations = 1")
                   + '[hardening]\nsandbox = "off"\n')
    env = {**os.environ, "ATTACK_RUN_DIR": str(run), "ATTACK_PROBLEM": str(PROBLEMS / "relu_add.py"),
           "ATTACK_LABEL": "m"}
    p = batch(tmp_path / "subs", "--problems", PROBLEMS, "--out", run, cfg=cfg, env=env, start_new_session=True)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    assert (tmp_path / "run.forged").exists()
    everything, _ = read_records(run / "results.jsonl")
    forged = [r for r in everything if r.get("speedup") == 42.0]
    assert len(forged) == 1 and Path(forged[0]["solution"]).name == "forge_record.py"  # the attack's line is there
    signed, passed_over = read_records(run / "results.jsonl", signed_only=True, run_id=run_id(run))
    assert passed_over == 1 and not any(r.get("speedup") == 42.0 for r in signed)

    p = batch(tmp_path / "subs", "--problems", PROBLEMS, "--out", run, "--resume", cfg=cfg, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 line(s)" in p.stderr and "no valid signature" in p.stderr
    signed, passed_over = read_records(run / "results.jsonl", signed_only=True, run_id=run_id(run))
    status = {Path(r["solution"]).name: r["status"] for r in signed}
    assert status == {"honest.py": "passed", "forge_record.py": "incorrect"}, status
    board = pd.read_csv(run / "leaderboard.csv")  # one row: (m, relu_add), its best solution the honest one
    assert len(board) == 1 and board["best_speedup"].max() < 10 and board["passed"].sum() == 1, board.to_dict("records")


def test_an_empty_folder_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    p = subprocess.run([sys.executable, "-m", "harness.cli", "batch", str(tmp_path / "empty"), "--problems",
                        str(PROBLEMS), "--device", "cpu", "--out", str(tmp_path / "run")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "no solution files under" in p.stderr, p.stderr[-2000:]
