"""The devices a batch runs on: the GPUs CUDA will show (from NVML, else asked of torch in a child, so
the batch's own process never touches CUDA), a device slot per GPU picked, the arch list builds
target, and the machine's fingerprint (env.json)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Optional

from ..version import __version__
from ..build import torch_versions
from .executor import DeviceSlot
from .plan import BatchError

_PROBE = ("import json, torch\n"
          "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
          "print(json.dumps([{'name': torch.cuda.get_device_name(i), 'cap': list(torch.cuda.get_device_capability(i))}"
          " for i in range(n)]))\n")


def _torch_cuda_build() -> bool:
    """Is the installed torch built with CUDA? (Without importing it.)"""
    try:
        return bool(torch_versions()[1])
    except ImportError:
        return False


def nvml_gpus() -> Optional[list[dict]]:
    """The GPUs CUDA will show this process, from NVML: no CUDA context and no torch import, a
    tenth of a second where the torch child takes 3-5 s (an H200 machine). None when it cannot say
    for sure: no NVML or no driver, a torch without CUDA, CUDA_VISIBLE_DEVICES in a form not mapped
    here (MIG), or GPUs of different models, which CUDA orders fastest first and NVML by bus."""
    if not _torch_cuda_build():
        return None
    try:
        import pynvml  # nvidia-ml-py
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - not installed, no driver
        return None
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name, uuid = pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)
            found.append({"name": name.decode() if isinstance(name, bytes) else name,
                          "cap": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                          "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid})
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    if len({g["name"] for g in found}) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        picked = []
        for v in (x.strip() for x in visible.split(",")):
            if not v:
                break  # CUDA stops at the first empty or invalid entry
            if v.isdigit() and int(v) < len(found):
                picked.append(found[int(v)])
            elif v.startswith("GPU-") and [g for g in found if g["uuid"] == v]:
                picked.append(next(g for g in found if g["uuid"] == v))
            else:
                return None  # MIG-, a short UUID, an index out of range: ask torch
        found = picked
    return [{"name": g["name"], "cap": g["cap"]} for g in found]


class GpuProbe:
    """The GPUs torch sees: from NVML when it can say (nvml_gpus), else asked in a child so this
    process never touches CUDA. A batch starts it first thing: the child's torch import and CUDA
    start (4-5 s on an H200 machine) then overlap the batch's planning instead of coming before
    everything else."""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None
        self.found = nvml_gpus()
        if self.found is not None:
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None

    def result(self, timeout: float = 180) -> list[dict]:
        if self.found is not None:
            return self.found
        if self.proc is None:
            return []
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cancel()
            return []
        try:
            return json.loads(out.strip().splitlines()[-1]) if self.proc.returncode == 0 and out.strip() else []
        except (ValueError, IndexError):
            return []

    def cancel(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def probe_gpus(timeout: float = 180, probe: Optional[GpuProbe] = None) -> list[dict]:
    return (probe or GpuProbe()).result(timeout)


def nvidia_smi() -> list[dict]:
    if not shutil.which("nvidia-smi"):
        return []
    base = "index,name,uuid,driver_version,memory.total"
    for fields in (base + ",compute_cap", base):  # older drivers do not know compute_cap
        try:
            p = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            return []
        if p.returncode == 0:
            keys = fields.split(",")
            return [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in p.stdout.strip().splitlines()]
    return []


def make_slots(device: str, gpus: Optional[str], probe: Optional[GpuProbe] = None) -> tuple[str, list[DeviceSlot], list[dict]]:
    """Resolve auto, pick the GPUs, and pin each slot's children to its GPU. `probe`: one already
    started (GpuProbe), else one is started here."""
    if device == "cpu":
        if probe is not None:
            probe.cancel()
        if gpus:
            raise BatchError("--gpus with --device cpu")
        return "cpu", [DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""})], []
    found = probe_gpus(probe=probe)
    if not found:
        if device == "cuda" or gpus:
            raise BatchError("--device cuda (or --gpus) asked for, but no CUDA device is visible")
        return "cpu", [DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""})], []
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    ids = list(range(len(found)))
    if gpus:
        try:
            ids = [int(x) for x in gpus.split(",") if x.strip()]
        except ValueError:
            raise BatchError(f"--gpus takes indices like 0,1 (got {gpus!r})") from None
        bad = [i for i in ids if not 0 <= i < len(found)]
        if bad:
            raise BatchError(f"--gpus {gpus}: only {len(found)} GPU(s) visible")
    slots = [DeviceSlot(f"cuda:{i}", "cuda", {"CUDA_VISIBLE_DEVICES": visible[i] if i < len(visible) else str(i)},
                        gpu_name=found[i]["name"]) for i in ids]
    return "cuda", slots, [found[i] for i in ids]


def cuda_arch_list(gpus: list[dict]) -> str:
    caps = sorted({tuple(g["cap"]) for g in gpus})
    return ";".join(f"{a}.{b}" for a, b in caps)


def fingerprint(device: str, slots: list[DeviceSlot], gpus: list[dict]) -> dict:
    torch_version, torch_cuda = torch_versions()
    return {"harness": __version__, "torch": torch_version, "torch_cuda": torch_cuda,
            "python": platform.python_version(), "host": socket.gethostname(), "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(), "device": device,
            "slots": [{"name": s.name, **s.env} for s in slots], "gpus": gpus, "nvidia_smi": nvidia_smi(),
            "torch_cuda_arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv}
