"""harness/batch/devices.py: the GPU slots a machine gets, the GPU probe started ahead of planning,
and NVML's answer for the GPUs CUDA will show. Without a GPU."""
from __future__ import annotations

import pytest


def test_gpu_slots_pin_each_gpu(monkeypatch):
    """Without a GPU here: the slots a two-GPU machine would get, each child pinned to its GPU, and one
    arch list for builds and evaluations."""
    import harness.batch.devices as b
    from harness.batch.plan import BatchError
    monkeypatch.setattr(b, "probe_gpus", lambda timeout=180, probe=None: [{"name": "H100", "cap": [9, 0]},
                                                                          {"name": "A100", "cap": [8, 0]}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    device, slots, gpus = b.make_slots("auto", None)
    assert device == "cuda" and [(s.name, s.env["CUDA_VISIBLE_DEVICES"]) for s in slots] == [("cuda:0", "2"),
                                                                                              ("cuda:1", "3")]
    assert b.cuda_arch_list(gpus) == "8.0;9.0"
    device, slots, gpus = b.make_slots("cuda", "1")
    assert [(s.name, s.env["CUDA_VISIBLE_DEVICES"]) for s in slots] == [("cuda:1", "3")] and gpus[0]["name"] == "A100"
    with pytest.raises(BatchError):
        b.make_slots("cuda", "5")
    monkeypatch.setattr(b, "probe_gpus", lambda timeout=180, probe=None: [])
    assert b.make_slots("auto", None)[0] == "cpu"
    with pytest.raises(BatchError):
        b.make_slots("cuda", None)


def test_the_gpu_probe_is_not_waited_for_when_started_and_a_cpu_batch_stops_it(monkeypatch):
    """The probe is a child started before the batch plans (its torch import overlaps the planning);
    its answer is read when the slots are made, and a batch that turns out to be on the CPU kills it."""
    import time

    import harness.batch.devices as b
    monkeypatch.setattr(b, "nvml_gpus", lambda: None)  # NVML cannot say: the child asks torch
    monkeypatch.setattr(b, "_PROBE", "import json, time; time.sleep(1.0); print(json.dumps([{'name': 'X', 'cap': [9, 0]}]))")
    t0 = time.perf_counter()
    probe = b.GpuProbe()
    assert time.perf_counter() - t0 < 0.5  # started, not waited for
    device, slots, gpus = b.make_slots("auto", None, probe)
    assert device == "cuda" and gpus == [{"name": "X", "cap": [9, 0]}]
    monkeypatch.setattr(b, "_PROBE", "import time; time.sleep(60)")
    probe = b.GpuProbe()
    assert b.make_slots("cpu", None, probe)[0] == "cpu" and probe.proc.returncode is not None
    monkeypatch.setattr(b, "_PROBE", "import time; time.sleep(60)")
    assert b.GpuProbe().result(timeout=0.5) == []  # a probe that hangs is no GPU, not a hung batch


def test_nvml_answers_for_the_gpus_cuda_will_show_and_otherwise_leaves_it_to_torch(monkeypatch):
    """nvml_gpus maps CUDA_VISIBLE_DEVICES (indices, full UUIDs) onto NVML's devices; a form it does
    not map (MIG), GPUs of different models (CUDA orders them fastest first), no NVML or a torch
    without CUDA give None, and the probe then asks torch in a child. When it answers, no child."""
    import sys
    import types

    import harness.batch.devices as b
    devs = [("NVIDIA H200", (9, 0), "GPU-aaa"), ("NVIDIA H200", (9, 0), "GPU-bbb")]
    nv = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: len(devs),
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: devs[h][0].encode(),
        nvmlDeviceGetUUID=lambda h: devs[h][2], nvmlDeviceGetCudaComputeCapability=lambda h: devs[h][1])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(b, "_torch_cuda_build", lambda: True)
    h200 = {"name": "NVIDIA H200", "cap": [9, 0]}
    for visible, want in ((None, [h200, h200]), ("1", [h200]), ("GPU-bbb,0", [h200, h200]), ("", []),
                          ("MIG-GPU-aaa/1/0", None), ("GPU-aa", None), ("2", None)):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert b.nvml_gpus() == want, visible
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probe = b.GpuProbe()
    assert probe.proc is None and probe.result() == [h200, h200]
    devs[1] = ("NVIDIA H100 80GB HBM3", (9, 0), "GPU-bbb")
    assert b.nvml_gpus() is None
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert [g["name"] for g in b.nvml_gpus()] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    monkeypatch.setattr(b, "_torch_cuda_build", lambda: False)
    assert b.nvml_gpus() is None
    monkeypatch.setattr(b, "_torch_cuda_build", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert b.nvml_gpus() is None
