"""Where the kernel listing's start-up goes (run on a GPU machine), and whether CUPTI called directly
pays it. Each mode runs in a fresh process after CUDA is up and a kernel has run:

  torch     an empty torch.profiler session, then a listing session around one relu (as runner.py)
  callback  CUPTI's callback API through ctypes: subscribe, enable the runtime and driver domains,
            one relu and one Triton kernel, the launch callbacks' symbol names
  activity  CUPTI's activity API through ctypes: CONCURRENT_KERNEL records, enable, one relu and one
            Triton kernel, flush, the records' names (read at the documented offset of `name`)

Each process prints one JSON line: seconds per step and the kernel names it saw.

Usage: python bench/diag/cupti_direct.py [--modes torch callback activity] [--repeat 2]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def find_cupti() -> str:
    import glob
    import os
    import site
    roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
    for root in roots:
        for pat in ("nvidia/cu13/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*", "torch/lib/libcupti*.so*"):
            hits = sorted(glob.glob(os.path.join(root, pat)))
            if hits:
                return hits[0]
    for pat in ("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*", "/usr/local/cuda*/targets/*/lib/libcupti.so*"):
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    raise SystemExit("libcupti not found")


def child(mode: str) -> None:
    out: dict = {"mode": mode}
    t = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def tri_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)

    def work():
        torch.relu(x)
        tri_copy[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()

    work()
    out["import_cuda_s"] = round(time.perf_counter() - t, 3)

    if mode == "torch":
        from torch.profiler import ProfilerActivity, profile
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            pass
        prof.events()
        out["start_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            work()
        names = sorted({e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))})
        out["listing_s"] = round(time.perf_counter() - t, 3)
        out["names"] = [n[:80] for n in names]
    else:
        import ctypes
        t = time.perf_counter()
        lib = ctypes.CDLL(find_cupti())
        out["lib"] = lib._name
        out["dlopen_s"] = round(time.perf_counter() - t, 3)
        if mode == "callback":
            class CallbackData(ctypes.Structure):
                _fields_ = [("callbackSite", ctypes.c_int), ("functionName", ctypes.c_char_p),
                            ("functionParams", ctypes.c_void_p), ("functionReturnValue", ctypes.c_void_p),
                            ("symbolName", ctypes.c_char_p), ("context", ctypes.c_void_p),
                            ("contextUid", ctypes.c_uint32), ("correlationData", ctypes.c_void_p),
                            ("correlationId", ctypes.c_uint32)]
            seen: list = []
            CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)

            def on_api(_user, domain, cbid, data):
                d = ctypes.cast(data, ctypes.POINTER(CallbackData)).contents
                fn = d.functionName or b""
                if d.callbackSite == 0 and b"Launch" in fn:
                    seen.append((domain, fn.decode(), (d.symbolName or b"").decode(errors="replace")))

            cb = CB(on_api)
            sub = ctypes.c_void_p()
            t = time.perf_counter()
            rc = lib.cuptiSubscribe(ctypes.byref(sub), cb, None)
            rc2 = lib.cuptiEnableDomain(1, sub, 1)  # driver API
            rc3 = lib.cuptiEnableDomain(1, sub, 2)  # runtime API
            out["start_s"] = round(time.perf_counter() - t, 3)
            out["rc"] = [rc, rc2, rc3]
            t = time.perf_counter()
            work()
            out["listing_s"] = round(time.perf_counter() - t, 3)
            lib.cuptiUnsubscribe(sub)
            out["names"] = sorted({f"{d}:{fn}:{sym[:80]}" for d, fn, sym in seen})
            t = time.perf_counter()
            work()
            out["after_s"] = round(time.perf_counter() - t, 4)
        else:
            import ctypes.util  # noqa: F401
            BUF = 8 << 20
            bufs: list = []
            names: list = []
            REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                   ctypes.POINTER(ctypes.c_size_t))
            DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_size_t)

            def on_request(buf, size, maxrec):
                b = ctypes.create_string_buffer(BUF + 8)
                bufs.append(b)
                addr = (ctypes.addressof(b) + 7) & ~7
                buf[0] = addr
                size[0] = BUF
                maxrec[0] = 0

            def on_done(_ctx, _stream, buf, _size, valid):
                rec = ctypes.c_void_p()
                while lib.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid), ctypes.byref(rec)) == 0:
                    kind = ctypes.c_uint32.from_address(rec.value).value
                    if kind == 10:  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                        p = ctypes.c_char_p.from_address(rec.value + 104).value
                        names.append((p or b"?").decode(errors="replace"))

            req, done = REQ(on_request), DONE(on_done)
            t = time.perf_counter()
            rc = lib.cuptiActivityRegisterCallbacks(req, done)
            rc2 = lib.cuptiActivityEnable(10)
            out["start_s"] = round(time.perf_counter() - t, 3)
            out["rc"] = [rc, rc2]
            t = time.perf_counter()
            work()
            lib.cuptiActivityFlushAll(1)
            out["listing_s"] = round(time.perf_counter() - t, 3)
            lib.cuptiActivityDisable(10)
            lib.cuptiActivityFlushAll(1)
            out["names"] = sorted({n[:80] for n in names})
            t = time.perf_counter()
            work()
            out["after_s"] = round(time.perf_counter() - t, 4)
    print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="+", default=["torch", "callback", "activity"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return
    for _ in range(a.repeat):
        for m in a.modes:
            t = time.perf_counter()
            r = subprocess.run([sys.executable, __file__, "--child", m], capture_output=True, text=True, timeout=300)
            line = (r.stdout.strip().splitlines() or [""])[-1]
            print(line or json.dumps({"mode": m, "rc": r.returncode, "err": r.stderr[-600:]}),
                  f"  # process {time.perf_counter() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
