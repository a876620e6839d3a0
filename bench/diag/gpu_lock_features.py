"""Which of what a harness candidate process does keeps the driver's checkpoint lock from holding it?

`cuCheckpointProcessLock` held a plain torch process (bench/diag/gpu_beside.py --lock) but answered
CUDA_ERROR_NOT_SUPPORTED (801) for every candidate process of the harness on an H200 (driver
580.159.04, session 47). Each child here makes its context, does one thing a candidate process does,
and is locked and unlocked by this process: CUPTI's activity records (harness/cupti.py), pinned host
memory, a CUDA IPC export of a live allocation (harness/cuda_ipc.py, as each trial's outputs are),
the same export with the allocation freed since, and a handle imported from another process.

    python bench/diag/gpu_lock_features.py
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

FEATURES = ["plain", "cupti", "pinned", "ipc_export", "ipc_export_freed", "ipc_import"]


class _Args(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


def child(feature: str) -> None:
    sys.path.insert(0, os.getcwd())
    import torch
    torch.zeros(1, device="cuda")
    keep = []
    if feature == "cupti":
        from harness.cupti import KernelRecorder
        rec, why = KernelRecorder.open(torch)
        if rec is not None:
            rec.start(spans=True)
            torch.relu(torch.randn(1024, device="cuda"))
            torch.cuda.synchronize()
            rec.stop()
        keep.append(rec)
        print(json.dumps({"cupti": rec is not None, "why": why}), file=sys.stderr)
    elif feature == "pinned":
        keep.append(torch.empty(1 << 20, pin_memory=True))
    elif feature.startswith("ipc_export"):
        from harness import cuda_ipc
        t = torch.empty(1 << 20, device="cuda")
        node = cuda_ipc.export(t)
        print(json.dumps(node), flush=True)  # for an importer
        if feature == "ipc_export_freed":
            del t
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        else:
            keep.append(t)
    elif feature == "ipc_import":
        from harness import cuda_ipc
        node = json.loads(sys.stdin.readline())
        mapped = cuda_ipc.Mapped(torch)
        keep += [mapped, mapped.tensor(node, "float32", [16], 64)]
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.readline()


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuInit(0)
    rows = []
    exporter = None
    for feature in FEATURES:
        p = subprocess.Popen([sys.executable, __file__, "--child", feature], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        if feature == "ipc_import":
            exporter = subprocess.Popen([sys.executable, __file__, "--child", "ipc_export"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
            p.stdin.write(exporter.stdout.readline())
            p.stdin.flush()
        line = p.stdout.readline().strip()
        while line and line != "ready":
            line = p.stdout.readline().strip()
        t = time.perf_counter()
        rc = cu.cuCheckpointProcessLock(ctypes.c_int(p.pid), ctypes.byref(_Args(timeoutMs=5000)))
        ms = (time.perf_counter() - t) * 1e3
        rc2 = cu.cuCheckpointProcessUnlock(ctypes.c_int(p.pid), None) if rc == 0 else None
        rows.append((feature, rc, round(ms, 2), rc2))
        p.kill()
        if exporter:
            exporter.kill()
    print("| the child did | lock rc | lock ms | unlock rc |\n|---|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
