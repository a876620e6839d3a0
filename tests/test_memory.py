"""harness/memory.py and what it holds the evaluations to: admission under a memory budget, the
measured need and `too_big`, trials that stream one at a time (the parent holds one trial a side,
not all of them), and the bound on what a candidate's answer may announce. CPU only."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT, TESTS, make_config

GB = 1 << 30


def _admission(host_gb=0.0, gpu_gb=0.0, avail=None, free=None, usage=None):
    from harness.memory import Admission
    return Admission(host_gb, gpu_gb, poll_s=0.02,
                     host_probe=lambda: (avail, 64 * GB if avail is not None else None),
                     gpu_probe=lambda visible: (free.get(visible) if free else None, 80 * GB),
                     usage_probe=lambda visible: usage)


def _later(fn):
    """fn() on a thread; (thread, box) where box gets its result and when it came."""
    box = {}

    def run():
        box["value"] = fn()
        box["at"] = time.perf_counter()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _slot_evaluation(tmp_path, model: str, forward: str = "x * 2", **overrides):
    """One evaluation on a CPU batch slot (SlotRuntime: run alone included) of a problem whose source
    is `model` (its Model class and what comes before it; one input of 64 floats) and of a solution
    whose forward returns `forward`."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.memory import Admission
    from harness.problems import find_problem
    prob_file = tmp_path / "problem_under_test.py"
    prob_file.write_text("import os\nimport torch\nimport torch.nn as nn\n\n\n" + model + "\n\n\n"
                         "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n")
    sol = tmp_path / "sol.py"
    sol.write_text(f"import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                   f"        return {forward}\n")
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0, **overrides})
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None, admission=Admission())
    try:
        return rt.evaluate(EvalTask(0, str(sol), find_problem(prob_file), None, cfg, None))
    finally:
        rt.close()


def test_an_evaluation_waits_until_the_budget_holds_it_and_the_oldest_never_waits():
    from harness.memory import Need
    adm = _admission(host_gb=10)
    a = adm.hold(Need(6 * GB))
    t, box = _later(lambda: adm.hold(Need(6 * GB)))
    time.sleep(0.2)
    assert "value" not in box  # 6 + 6 > 10: the second waits
    released = time.perf_counter()
    a.release()
    t.join(5)
    b = box["value"]
    assert box["at"] >= released and b.waited_s >= 0.15
    # the oldest hold proceeds whatever the others hold, so that two growing ones cannot deadlock
    c = adm.hold(Need(1 * GB))
    b.grow(Need(9 * GB, measured=True))  # b is the oldest now: 9 + 1 > 10, and it is not kept waiting
    t, box = _later(lambda: c.grow(Need(5 * GB, measured=True)))
    time.sleep(0.2)
    assert "value" not in box
    b.release()
    t.join(5)
    assert c.need.host == 5 * GB
    c.release()
    assert adm.peak_holds == 2


def test_a_measured_need_below_the_provisional_one_is_given_back_at_once():
    from harness.memory import Need
    adm = _admission(host_gb=2)
    a = adm.hold(Need(1.5 * GB))
    t, box = _later(lambda: adm.hold(Need(1 * GB)))
    time.sleep(0.1)
    assert "value" not in box
    a.grow(Need(0.2 * GB, measured=True))  # smaller than held: the rest is free now
    t.join(5)
    assert "value" in box and a.need.host == 0.2 * GB


def test_a_need_past_what_one_evaluation_can_ever_get_is_too_big():
    from harness.memory import Need, TooBig
    adm = _admission(host_gb=4)
    h = adm.hold()
    with pytest.raises(TooBig, match=r"needs 5\.0 GB of host memory; this machine can give one evaluation 4\.0 GB"):
        h.grow(Need(5 * GB, measured=True))
    h.release()
    # with no budget: the machine's total, less the margin
    adm = _admission(avail=30 * GB)
    h = adm.hold()
    with pytest.raises(TooBig):
        h.grow(Need(63 * GB, measured=True))
    h.grow(Need(20 * GB, measured=True))
    h.release()


def test_what_the_machine_has_now_and_each_gpu_are_counted_beside_the_holds():
    """Without a budget: what the host has available now, less the margin and what the others hold
    (perhaps taken already: counted twice rather than risk the machine); per GPU likewise, from
    NVML's free memory."""
    from harness.memory import Need
    adm = _admission(avail=10 * GB, free={"0": 12 * GB, "1": 12 * GB})
    a = adm.hold(Need(3 * GB, 5 * GB), gpu="0")
    b = adm.hold(Need(3 * GB, 5 * GB), gpu="1")  # another GPU: its memory is its own
    t, box = _later(lambda: adm.hold(Need(3 * GB, 1 * GB), gpu="1"))  # host: 10 - 2 - 6 < 3
    time.sleep(0.15)
    assert "value" not in box
    a.release()
    t.join(5)
    c = box["value"]
    t, box = _later(lambda: adm.hold(Need(1 * GB, 6 * GB), gpu="1"))  # GPU 1: 12 - 1 - 6 < 6
    time.sleep(0.15)
    assert "value" not in box
    b.release()
    c.release()
    t.join(5)
    assert "value" in box


def test_on_a_gpu_only_what_an_evaluations_processes_have_not_taken_yet_is_counted_again():
    """NVML's free memory already lacks what a running evaluation's processes hold: of its hold only
    the rest is still to come. Counted whole, a second evaluation that fits waited (level 2 on an
    H100: 20-60 s a record); a process NVML does not list has taken nothing yet."""
    from harness.memory import Need
    usage = {101: 20 * GB, 102: 5 * GB}  # the first evaluation's reference and candidate
    free = {"0": 40 * GB}
    adm = _admission(avail=100 * GB, free=free, usage=usage)  # 80 GB, 40 taken
    a = adm.hold(Need(1 * GB, 30 * GB), gpu="0")
    a.track(101, 102)
    tb, boxb = _later(lambda: adm.hold(Need(1 * GB, 30 * GB), gpu="0"))  # 40 - 1 (margin) - (30 - 25) >= 30
    tb.join(2)
    b = boxb["value"]
    t, box = _later(lambda: adm.hold(Need(1 * GB, 30 * GB), gpu="0"))  # and b's 30 GB not taken yet
    time.sleep(0.15)
    assert "value" not in box
    b.track(103)  # its processes take its share: the GPU's free memory falls as much
    usage[103], free["0"] = 30 * GB, 10 * GB
    time.sleep(0.15)
    assert "value" not in box  # 10 - 1 - 5 < 30
    a.release()  # its processes end with it
    del usage[101], usage[102]
    free["0"] = 35 * GB
    t.join(5)
    assert "value" in box
    b.release()
    box["value"].release()
    # without per-process figures, holds count whole: 40 - 1 - 30 < 30
    adm = _admission(avail=100 * GB, free={"0": 40 * GB}, usage=None)
    a = adm.hold(Need(1 * GB, 30 * GB), gpu="0")
    a.track(101, 102)
    t, box = _later(lambda: adm.hold(Need(1 * GB, 30 * GB), gpu="0"))
    time.sleep(0.15)
    assert "value" not in box
    a.release()
    t.join(5)


def test_waiting_for_memory_first_asks_idle_sessions_to_go():
    from harness.memory import Need
    adm = _admission(host_gb=4)
    asked = []
    a = adm.hold(Need(3 * GB))
    adm.on_wait = lambda: (asked.append(1), a.release())  # what idled gives its memory back
    b = adm.hold(Need(3 * GB))
    assert asked == [1] and b.need.host == 3 * GB


def test_the_need_is_measured_on_the_references_first_trial():
    """Both sides' payloads in the parent, and the reference's working memory (on the CPU, for each
    process); on a GPU, each process's device peak and context."""
    from harness.memory import PROCESS_GPU, measured
    cpu = measured(payload=100, work_rss=1000, gpu_peak=None, device="cpu")
    assert (cpu.host, cpu.gpu, cpu.measured) == (2200, 0, True)
    gpu = measured(payload=100, work_rss=1000, gpu_peak=5000, device="cuda")
    assert (gpu.host, gpu.gpu) == (1200, 10000 + 2 * PROCESS_GPU)


def test_a_batch_under_a_small_budget_runs_its_evaluations_one_after_another(tmp_path):
    """Two lanes on the CPU slot and a budget that holds one provisional need but not two: the second
    evaluation waits (phases.memory_wait_s) until the first's measured need, far below it, frees
    the budget; both pass. A problem whose measured need exceeds the budget gets `too_big`, a record
    like any other, with the numbers."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.memory import Admission
    from harness.problems import find_problem
    from harness.records.result import Status
    sol = tmp_path / "relu.py"
    sol.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                   "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    # a cache of its own: no need kept by an earlier run (memory.save_need) to start from
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0, "memory.host_gb": 1.5,
                                       "cache_dir": str(tmp_path / "cache")})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    adm = Admission(1.5)
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}, concurrency=2), "small", None, None, 2,
                     admission=adm)
    try:
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(rt.evaluate, [EvalTask(i, str(sol), prob, None, cfg, None) for i in range(2)]))
        assert [o.record.status for o in outs] == [Status.passed] * 2, [o.record.error for o in outs]
        waits = sorted(o.record.phases.memory_wait_s for o in outs)
        assert waits[0] < 0.05 and waits[1] > 0.1, waits
        assert adm.peak_holds == 2
    finally:
        rt.close()
    full = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "full", None, admission=Admission(0.1))
    try:
        out = full.evaluate(EvalTask(2, str(sol), prob, None, cfg, None))
        assert out.record.status == Status.too_big and out.error is None
        assert "this machine can give one evaluation 0.1 GB of host memory" in out.record.error
    finally:
        full.close()


PEAK = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import make_config
from harness.evaluation import evaluate

def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

import torch  # its own memory is not the trials'
cfg = make_config(device="cpu", size="full", **{{"correctness.trials": 6, "correctness.extra_shapes": False,
                                                "timing.budget_s": 0.1, "timing.min_rounds": 1}})
before = rss("VmRSS")
rec = evaluate({sol!r}, {prob!r}, cfg)
print(json.dumps({{"status": rec.status.value, "error": rec.error, "grew": rss("VmHWM") - before,
                   "trials": len(rec.trials)}}))
"""


def test_the_parent_holds_one_trial_a_side_not_all_of_them(tmp_path):
    """Six full-size trials of relu_add (64 MB of outputs and 128 MB of inputs a trial): the parent
    used to receive every trial of both sides, inputs included, in one message each (1.9 GB here;
    on KernelBench level 2 it held 43 GB, and a reply past 16 GiB failed an honest solution). Now
    one trial of each side at a time, the inputs only where a call changed them: its peak grows by
    a few trials' outputs at most."""
    sol = tmp_path / "relu.py"
    sol.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                   "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    code = PEAK.format(tests=str(TESTS), sol=str(sol), prob=str(TESTS / "problems" / "relu_add.py"))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["status"] == "passed" and got["trials"] == 6, got
    assert got["grew"] < 400 * 2**20, f"the parent's peak grew by {got['grew'] / 2**20:.0f} MB"


def test_a_reply_may_announce_only_what_its_request_allows():
    """The frames a reply announces are checked before any is read: past the request's allowance
    (a candidate's trial: twice the reference's outputs, its inputs and a header), FrameTooLarge;
    a trials reply without one may take what the host can hold now, not a fixed 16 GiB."""
    import os

    from harness.memory import frame_limit
    from harness.process.worker import FrameTooLarge, Worker
    from harness.reference import frame_allowance
    w = Worker.__new__(Worker)
    r, wfd = os.pipe()
    w._rep_r, w._buf, w.out_of_step = r, bytearray(), False
    w._p0, w.stopped_for = 0.0, lambda: 0.0
    os.write(wfd, b'{"op": "trials", "ok": true, "blob_sizes": [1000]}\n')
    with pytest.raises(FrameTooLarge, match="announces"):
        w.wait_reply("trials", 5, max_bytes=999)
    assert w.out_of_step
    assert frame_limit() >= 1 << 30 and frame_limit(0.5) == 1 << 29
    assert frame_allowance(100 << 20, 10 << 20) == (274 << 20)
    os.close(r)
    os.close(wfd)


@pytest.mark.parametrize("code,too_big", [(-9, True), (-11, False)])
def test_a_reference_killed_outright_mid_trial_is_too_big_not_a_failed_problem(code, too_big):
    """SIGKILL mid-trial is the OOM killer's mark: its solutions get `too_big` (re-run alone first in
    a batch), where a failed problem would have skipped every solution of it without a record. A
    crash of any other kind is still the problem's failure."""
    from types import SimpleNamespace

    from harness.problems import find_problem
    from harness.process.worker import WorkerDied
    from harness.reference import ReferenceError, ReferenceSession, ReferenceTooBig

    def died(*a, **k):
        raise WorkerDied("worker died", code)
    s = ReferenceSession(find_problem(TESTS / "problems" / "relu_add.py"), make_config(device="cpu"), "cpu", "small", None)
    s.worker = SimpleNamespace(request=died, log_tail=lambda: "", close=lambda: None, returncode=None)
    with pytest.raises(ReferenceError) as e:
        s.trial(0)
    assert isinstance(e.value, ReferenceTooBig) is too_big
    assert s.worker is None  # closed: the next solution starts a fresh one


def test_first_runs_on_a_gpu_start_one_at_a_time_and_hold_what_is_left_until_measured():
    """A problem's first run has no measured need (KernelBench level 1: kilobytes to 17 GB of
    inputs): it starts while a quarter of the GPU is left, holds all that is left until its
    reference's first trial measures it, and no other first run starts beside it. On 2 GB each, nine
    level-1 problems started at once on an H100 and 25 ran out of memory."""
    from harness.memory import PROVISIONAL, Need
    free = {"0": 60 * GB}
    adm = _admission(avail=100 * GB, free=free, usage={})
    m = adm.hold(Need(1 * GB, 10 * GB), gpu="0")  # measured, running
    a = adm.hold(PROVISIONAL, gpu="0")
    assert a.need.first and a.need.gpu == 49 * GB  # 60 free - 1 margin - 10 still to come
    tf, boxf = _later(lambda: adm.hold(PROVISIONAL, gpu="0"))  # another first run: after a's
    time.sleep(0.15)
    assert "value" not in boxf
    a.grow(Need(1 * GB, 8 * GB))  # measured: it keeps 8 GB, the rest goes to the next first run
    assert (a.need.gpu, a.need.first) == (8 * GB, False)
    tf.join(5)
    b = boxf["value"]
    assert b.need.first and b.need.gpu == 41 * GB
    t, box = _later(lambda: adm.hold(Need(1 * GB, 5 * GB), gpu="0"))  # measured, but the rest is b's
    time.sleep(0.15)
    assert "value" not in box
    b.grow(Need(1 * GB, 3 * GB))
    t.join(5)
    c = box["value"]
    assert c.need.gpu == 5 * GB
    for h in (m, a, b, c):
        h.release()
    # less than a quarter of the GPU left: a first run waits, a measured need that fits does not
    free["0"] = 15 * GB
    m = adm.hold(Need(1 * GB, 2 * GB), gpu="0")
    tf, boxf = _later(lambda: adm.hold(PROVISIONAL, gpu="0"))  # 15 - 1 - 2 < 20
    time.sleep(0.15)
    n = adm.hold(Need(1 * GB, 2 * GB), gpu="0")
    assert "value" not in boxf
    free["0"] = 40 * GB
    tf.join(5)
    assert boxf["value"].need.gpu == 35 * GB
    for h in (m, n, boxf["value"]):
        h.release()


def test_a_run_alone_waits_for_every_other_evaluation_on_its_gpu_and_admits_no_newcomer():
    """What ran out of memory beside others runs again alone (batch/executor.py): once the other
    evaluations on its GPU ended, with idle processes closed (on_wait), and no newcomer admitted on
    that GPU while it waits or runs; another GPU goes on. Runs alone go one at a time."""
    from harness.memory import Need
    adm = _admission(avail=100 * GB, free={"0": 60 * GB, "1": 60 * GB}, usage={})
    asked = []
    adm.on_wait = lambda: asked.append(1)
    a = adm.hold(Need(1 * GB, 10 * GB), gpu="0")
    b = adm.hold(Need(1 * GB, 10 * GB), gpu="1")
    ta, boxa = _later(lambda: adm.alone("0"))
    time.sleep(0.1)
    tn, boxn = _later(lambda: adm.hold(Need(1 * GB, 1 * GB), gpu="0"))  # a newcomer on GPU 0
    other = adm.hold(Need(1 * GB, 1 * GB), gpu="1")  # GPU 1 is not held up
    time.sleep(0.15)
    assert "value" not in boxa and "value" not in boxn
    a.grow(Need(1 * GB, 12 * GB))  # an evaluation already running still grows: no deadlock
    a.release()
    ta.join(5)
    alone = boxa["value"]
    assert asked and alone.alone
    tb, boxb = _later(lambda: adm.alone("1"))  # a second run alone waits for the first to end
    time.sleep(0.15)
    assert "value" not in boxn and "value" not in boxb
    alone.release()
    tn.join(5)
    assert "value" in boxn
    time.sleep(0.15)
    assert "value" not in boxb  # the lock is free now, but b and other still run on GPU 1
    b.release()
    other.release()
    tb.join(5)
    assert "value" in boxb
    boxn["value"].release()
    boxb["value"].release()


def test_a_reference_out_of_memory_as_it_starts_gets_too_big_after_a_run_alone(tmp_path):
    """The reference's build or warm-up ran out of memory (beside other evaluations, most likely):
    a record `too_big`, given after a run alone, not a failed problem whose solutions get no record
    at all (25 of KernelBench level 1's 100 on an H100, their references started beside others)."""
    from harness.records.result import Status
    out = _slot_evaluation(tmp_path, "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                           "        raise MemoryError('CUDA out of memory. Tried to allocate 8.00 GiB')\n\n"
                           "    def forward(self, x):\n        return x", forward="x")
    assert not out.problem_failed and out.record is not None, out.error
    assert out.record.status == Status.too_big and "rerun_alone" in out.record.flags, out.record
    assert "Model failed to build" in out.record.error


def test_a_measured_need_is_kept_for_the_next_run_of_the_problem(tmp_path):
    """The first run of a problem measures its need; the parent keeps it under the cache folder, and
    the next run (another batch, a --resume) is admitted with it instead of as a first run, which on
    a GPU would go one at a time holding all that is left."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.memory import PROVISIONAL, Admission
    from harness.problems import find_problem
    from harness.records.result import Status
    sol = tmp_path / "relu.py"
    sol.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                   "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0, "cache_dir": str(tmp_path / "cache")})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    asked = []

    class Spy(Admission):
        def hold(self, need=PROVISIONAL, gpu=None, measured=None):
            asked.append(need)
            return super().hold(need, gpu, measured)

    totals = []
    for i in range(2):
        rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None, admission=Spy())
        try:
            out = rt.evaluate(EvalTask(i, str(sol), prob, None, cfg, None))
        finally:
            rt.close()
        assert out.record.status == Status.passed, out.record.error
        totals.append(out.record.phases.total_s)
    assert asked[0].first and not asked[1].first and asked[1].measured and asked[1].host > 0
    kept = list((tmp_path / "cache" / "needs").glob("*.json"))
    assert len(kept) == 1 and '"problem":"relu_add"' in kept[0].read_text()
    # and how long it took, for the next batch's order (pipeline._plan_order): the same figure the
    # executor reads back for this problem on this kind of device
    from harness.memory import KeptNeed
    took = KeptNeed.model_validate_json(kept[0].read_text()).seconds
    assert took is not None and 0 < took <= max(totals) + 0.01, (took, totals)
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None, admission=Spy())
    assert rt.expected_seconds(prob, cfg.cache_dir) == took
    rt.close()


def test_the_torch_compile_baseline_is_compiled_holding_the_references_share_only(tmp_path, monkeypatch):
    """Inductor's 10-30 s of host work run in the reference's process after its first trial measured
    the problem and before the candidate's first forward: meanwhile the evaluation holds only the
    reference's share of the GPU need, and grows to the whole before the candidate runs (KernelBench
    level 1 held both sides' 13-25 GB through it, and waited for memory most of each record). The
    compile itself runs on a GPU only: here a stand-in records what was held while it ran."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.memory import PROVISIONAL, Admission, Hold, Need
    from harness.problems import find_problem
    from harness.records.result import Status
    from harness.stages import baseline
    need = Need(host=3 * GB, gpu=20 * GB, measured=True)
    assert need.compiling() == Need(host=3 * GB, gpu=10 * GB + GB // 2, measured=True)
    assert PROVISIONAL.compiling() == PROVISIONAL  # a first run: nothing measured to share yet

    events = []
    real_grow = Hold.grow
    monkeypatch.setattr(Hold, "grow", lambda self, n: (events.append(("grow", n)), real_grow(self, n))[1])
    monkeypatch.setattr(baseline, "due", lambda ctx, ref: not ctx.compiled_ahead)

    def compile_ahead(ctx, ref):
        events.append(("compile", ctx.hold.need))
        ctx.compiled_ahead = True
        ref.close()  # as after a failed compile: a new reference process, whose trial the candidate meets
        ref.start()
        return True
    monkeypatch.setattr(baseline, "compile_ahead", compile_ahead)
    monkeypatch.setattr(Need, "compiling", lambda self: Need(host=self.host // 2, measured=self.measured))
    sol = tmp_path / "relu.py"
    sol.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                   "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0, "cache_dir": str(tmp_path / "cache")})
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None, admission=Admission())
    try:
        out = rt.evaluate(EvalTask(0, str(sol), find_problem(TESTS / "problems" / "relu_add.py"), None, cfg, None))
    finally:
        rt.close()
    assert out.record is not None and out.record.status == Status.passed, out.error or out.record.error
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["grow", "compile", "grow"], events
    share, whole = events[0][1], events[2][1]
    assert events[1][1] == share and share.host == whole.host // 2 and whole.measured
    assert out.record.phases.processes_s >= 0 and out.record.phases.correctness_s < out.record.phases.total_s


def test_an_evaluation_whose_baseline_is_to_be_compiled_is_admitted_with_the_references_share(tmp_path):
    """A GPU slot admits an evaluation with `Need.compiling` while its problem's torch.compile baseline
    is not cached for the slot's device and stack, and with the whole need once it is."""
    from harness import baselines
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.memory import Need
    from harness.problems import find_problem
    from harness.records.result import EnvInfo
    cfg = make_config(device="cuda", **{"cache_dir": str(tmp_path / "cache"), "timing.compile_baseline": "auto"})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    env = EnvInfo(device="cuda", gpu_name="NVIDIA H100 80GB HBM3", driver="580", torch="2.11.0", cuda="13.0",
                  python="3.12", harness="test", hostname="h")

    class Session:
        need, expected = Need(host=GB, gpu=20 * GB, measured=True), None

    Session.env = env
    rt = SlotRuntime(DeviceSlot("cuda:0", "cuda", {"CUDA_VISIBLE_DEVICES": "0"}), "full", None)
    task = EvalTask(0, "x.py", prob, None, cfg, None)
    assert rt._need(Session(), task).gpu == 10 * GB + GB // 2
    key, stack = baselines.key_for(prob.source_hash, "full", None, env, cfg)
    baselines.store(cfg, key, stack, prob.name, [1.0, 1.1], None)
    assert rt._need(Session(), task).gpu == 20 * GB
    cfg.timing.compile_baseline = "off"
    Session.env = None
    assert rt._need(Session(), task).gpu == 20 * GB


def test_a_judged_trial_is_let_go_by_the_reference_whatever_the_verdict(monkeypatch):
    """The reference's outputs of a judged trial leave its process (a GB-sized one kept there stayed
    beside every later trial and the timing: 26 GB reference processes on KernelBench level 1, whose
    first trial measured 13 GB, and other evaluations' timing ran out of memory)."""
    from harness.stages import check
    released = []

    class Ref:
        def release(self, r):
            released.append(r)

    def fake(ctx, cand, ref, i, c, box, seeds, what):
        box[0] = "again"  # the trial asked again (with inputs, or as bytes): that one is let go
        if c == "raise":
            raise RuntimeError("judging failed")
        return "verdict"

    monkeypatch.setattr(check, "_judge", fake)
    assert check.judge(None, None, Ref(), 0, "c", "first") == "verdict"
    with pytest.raises(RuntimeError):
        check.judge(None, None, Ref(), 0, "raise", "first")
    assert released == ["again", "again"]


# a reference that fails on its 13th call: past its start and trials, in its first timing round
FAILS_WHEN_TIMED = ("class Model(nn.Module):\n    calls = 0\n\n    def forward(self, x):\n        Model.calls += 1\n"
                    "        if Model.calls > 12:\n            {what}\n        return x * 2")


def test_a_reference_out_of_memory_while_timed_gets_too_big_not_an_internal_error(tmp_path):
    """Out of memory in the reference's timing rounds (beside other evaluations' memory, most likely)
    is `too_big` after a run alone, with a record, not an internal error that left the solution
    without one (two KernelBench level-1 problems on an H100)."""
    from harness.records.result import Status
    out = _slot_evaluation(tmp_path, FAILS_WHEN_TIMED.format(what="raise MemoryError('CUDA out of memory. Tried to allocate 6.00 GiB')"))
    assert out.record is not None, out.error
    assert out.record.status == Status.too_big and "rerun_alone" in out.record.flags, out.record
    assert "timing" in out.record.error, out.record.error


def test_a_reference_that_dies_while_timed_is_the_problems_failure_not_the_solutions(tmp_path):
    """The reference's process ending in a timing round was blamed on the solution ("the solution's
    process died while being timed: exit code 0", KernelBench level1/42 on an H100)."""
    out = _slot_evaluation(tmp_path, FAILS_WHEN_TIMED.format(what="os._exit(0)"))
    assert out.record is None and out.problem_failed, out.record
    assert "the reference's process died while timed" in out.error, out.error


def test_a_torch_compile_baseline_that_fails_while_timed_leaves_the_reference_running(tmp_path):
    """torch.compile(Model) failing in a timing round (Inductor, or out of memory beside other
    evaluations) costs the record its baseline, not its verdict: the reference's process used to end
    after the failed command, and the next round found it gone (KernelBench level1/29 on an H100: its
    problem failed, "the reference's process died while timed: exit code 0")."""
    from harness.records.result import Status
    # (a trusted problem standing in for one Inductor cannot compile)
    out = _slot_evaluation(tmp_path, "def _fails(model, *a, **k):\n    def call(*args):\n"
                           "        raise RuntimeError('this model does not compile')\n    return call\n\n\n"
                           "torch.compile = _fails\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                           "        return x * 2", **{"timing.compile_baseline": "on", "cache_dir": str(tmp_path / "cache")})
    assert out.record is not None, out.error
    assert out.record.status == Status.passed, (out.record.status, out.record.error)
    assert "does not compile" in out.record.timing_method.get("compile_baseline_error", ""), out.record.timing_method


def test_an_admitted_evaluation_growing_its_hold_is_not_kept_waiting_by_a_newcomer_behind_a_run_alone():
    """A newcomer that waits behind a run alone cannot be the oldest that always proceeds: the run
    alone waits for the admitted evaluations to end, and one of them growing its hold (after its
    compile, or its first trial) must then be let through, or nothing moves (a KernelBench level-1
    batch on an H100 stood still for 270 s: one admitted evaluation growing, a run alone, four
    newcomers)."""
    from harness.memory import Need
    adm = _admission(free={"0": 10 * GB}, usage={})
    a = adm.hold(Need(host=GB, gpu=5 * GB, measured=True), "0")
    newcomer, nbox = _later(lambda: adm.hold(Need(host=GB, gpu=30 * GB, measured=True), "0"))
    time.sleep(0.1)
    y = adm.hold(Need(host=GB, gpu=2 * GB, measured=True), "0")  # fits beside a while the newcomer waits
    alone, abox = _later(lambda: adm.alone("0"))
    time.sleep(0.1)
    a.release()
    grown, gbox = _later(lambda: y.grow(Need(host=GB, gpu=20 * GB, measured=True)))
    grown.join(3)
    assert "at" in gbox, "the admitted evaluation's grow waited for the newcomer behind the run alone"
    assert "value" not in abox and "value" not in nbox
    y.release()
    alone.join(3)
    assert "value" in abox and "value" not in nbox  # the run alone, then the newcomer
    abox["value"].release()
    newcomer.join(3)
    assert "value" in nbox
    nbox["value"].release()
