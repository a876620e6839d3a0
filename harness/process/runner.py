"""The candidate and reference roles of a child process: a `Runner` holds the problem (and for a
candidate, the solution) and answers the parent's commands (build, trials, timing calls, the kernel
list, the problem linter's runs); child.serve reads them and sends its replies.

Nothing here compares outputs or reduces timings into statistics: the parent does that.
"""
from __future__ import annotations

import time
from typing import Optional

# mixed into a trial's seed for its forward's generators, so they do not repeat its inputs' draws
FORWARD_SEED = 0x5EED_F0D


class Runner:
    def __init__(self, setup: dict):
        import torch

        from ..problems import apply_sizes, import_file, import_source, meta

        self.torch = torch
        self.setup = setup
        self.role = setup.role
        self.device = setup.device
        if not setup.allow_tf32:
            # fp32 means fp32: cuDNN's TF32 default would make the reference itself miss fp32
            # tolerances on convolutions (and a candidate may not inherit it either)
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        if self.device == "cpu" and setup.cpu_threads:
            torch.set_num_threads(int(setup.cpu_threads))
        self.problem = (import_source(setup.problem_source, setup.problem_path, "problem_module")
                        if setup.problem_source is not None else import_file(setup.problem_path, "problem_module"))
        self.meta = meta(self.problem)
        if setup.size == "small":
            apply_sizes(self.problem, self.meta.get("small", {}))
        self.base_sizes = {k: getattr(self.problem, k) for k in _shape_keys(self.meta) if hasattr(self.problem, k)}
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}.get(setup.dtype or "")
        self.model = None
        self.cls = None
        self.cache: dict = {}  # per-process timing state: CUDA graphs, compiled model, L2 reset
        self.ext_calls = [0]
        self.recorder = None  # the process's cupti.KernelRecorder: timing's spans and launch counts, the kernel list
        self.lister = None  # the recorder when the kernel list is taken through CUPTI (start_profiler)
        self.listing: Optional[str] = None  # how: "cupti" or "torch.profiler"
        self.span_why: Optional[str] = None  # why CUPTI could not be had for the kernel spans
        # seconds of each step of a candidate's load, and when it began (epoch), for the load reply
        self.steps: dict[str, str] = {"began": f"{time.time():.3f}"}
        if self.role == "candidate":
            from ..timing.hold import is_pinned, pin
            t0 = time.perf_counter()
            if not is_pinned():  # a primed standby pinned them already, as early and with no solution code
                pin(torch)
            t1 = time.perf_counter()
            self._poison()
            t2 = time.perf_counter()
            _count_extension_calls(self.ext_calls)
            if setup.jail is not None:  # from here on, the solution's uid: its first line runs next
                from ..sandbox import enter
                enter(setup.jail)
            sol = import_file(setup.solution_path, "solution_module")
            self.cls = getattr(sol, "ModelNew", None)
            self.steps.update(pin_s=f"{t1 - t0:.3f}", poison_s=f"{t2 - t1:.3f}",
                              import_s=f"{time.perf_counter() - t2:.3f}")
        else:
            self.cls = getattr(self.problem, "Model", None)
            self._poison()  # its allocator laid out as the candidate's
        self.base_rss = _rss()  # a trial's working memory is what the process grows beyond this
        # outputs that stayed on the device (TrialsCommand.share): a candidate's exported ones, alive
        # until its next command; a reference's kept ones by trial token, for JudgeCommand
        self.shared: list = []
        self.kept: dict[int, list] = {}
        self.persisted: dict[int, int] = {}  # tokens kept for the problem's later solutions -> bytes
        self._tokens = 0

    def _poison(self) -> None:
        """Fill memory the candidate might inherit with NaN: a kernel that returns torch.empty()
        without writing it reads NaN, never a stale answer. (Separate processes already keep the
        reference's outputs out of reach; this covers the candidate's own earlier calls too.)
        The reference does the same, so that both sides' tensors are carved alike from one cached
        block: with the candidate's alone poisoned, an identity of level2/61 (ConvTranspose3d) ran
        6.5% faster than its reference in every run on an H100, 1.00 with both.
        bench/results/kernelbench-level2-NVIDIA_H100_80GB_HBM3.md"""
        torch = self.torch
        if self.device == "cuda" and self.setup.poison_max_bytes:
            free, _ = torch.cuda.mem_get_info()
            n = max(min(int(free * 0.25), int(self.setup.poison_max_bytes)) // 4, 1)
            blk = torch.full((n,), float("nan"), device="cuda")
            torch.cuda.synchronize()
            del blk  # stays in the caching allocator, NaN-filled, for the candidate's allocations

    # -- inputs ----------------------------------------------------------------------------------
    def make_inputs(self, seed: int, shape: Optional[dict] = None) -> list:
        torch = self.torch
        from ..problems import apply_sizes
        apply_sizes(self.problem, {**self.base_sizes, **(shape or {})})
        with torch.random.fork_rng(devices=[0] if self.device == "cuda" else []):
            self.seed_generators(seed)
            # Generating on the device gives fresh values in fresh buffers at GPU speed.
            with torch.device(self.device):
                inputs = list(self.problem.get_inputs())
        return [self._cast(x) for x in inputs]

    def seed_generators(self, seed: int) -> None:
        """The generators get_inputs and a forward draw from: the CPU's and this GPU's
        (torch.manual_seed also seeds XPU and MTIA, each a lazy call that formats the stack: 0.5 ms
        of every timed call)."""
        self.torch.default_generator.manual_seed(seed)
        if self.device == "cuda":
            self.torch.cuda.manual_seed(seed)

    def _cast(self, x):
        torch = self.torch
        if isinstance(x, torch.Tensor):
            x = x.to(self.device)
            if self.dtype is not None and x.is_floating_point():
                x = x.to(self.dtype)
        return x

    def seed_forward(self, seed: int) -> None:
        """Before the forward of the call whose inputs came from `seed` (trials and timed calls):
        a forward that draws random numbers (dropout in training mode, as KernelBench leaves it)
        draws the same ones on both sides, whatever either process ran before."""
        self.seed_generators(FORWARD_SEED ^ seed)

    # -- commands --------------------------------------------------------------------------------
    def build(self, init_seed: int) -> None:
        torch = self.torch
        from ..problems import apply_sizes
        if self.cls is None:
            raise InterfaceError("solution defines no class ModelNew" if self.role == "candidate"
                                 else "problem defines no class Model")
        apply_sizes(self.problem, self.base_sizes)
        torch.manual_seed(init_seed)
        init_inputs = list(self.problem.get_init_inputs())
        try:
            model = self.cls(*init_inputs)
        except TypeError as e:
            raise InterfaceError(f"ModelNew cannot be built from get_init_inputs(): {e}{self._which_problem()}") from None
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
            if self.dtype is not None:
                model = model.to(self.dtype)
            model.train(bool(self.meta.get("train", True)))
        self.model = model

    def timed_callable(self, variant: str):
        if variant == "compiled":
            if self.role != "reference":
                raise InterfaceError("only the reference has a torch.compile variant")
            if "compiled" not in self.cache:
                self.cache["compiled"] = self.torch.compile(self.model)
            return self.cache["compiled"]
        return lambda *inputs: self.forward(list(inputs))

    def forward(self, inputs: list):
        try:
            return self.model(*inputs)
        except TypeError as e:
            if "positional argument" in str(e) or "forward()" in str(e):
                raise InterfaceError(f"forward rejects get_inputs(): {e}{self._which_problem()}") from None
            raise

    def _which_problem(self) -> str:
        """A solution scored against a problem it was not written for fails here first: say which
        problem it met (a new user's wrong --problem gave only torch's TypeError)."""
        if self.role != "candidate":
            return ""
        from pathlib import Path
        return f" (is {Path(self.setup.problem_path).stem} the problem this solution was written for?)"

    def trials(self, seeds: list[int], shapes: list[dict], with_inputs: bool = False,
               share: bool = False) -> tuple[list, dict]:
        """Run one forward per seed on fresh inputs; return each trial as a payload (harness.payload:
        outputs, and the inputs after the call where the call changed them or `with_inputs` asks,
        with a reference's pristine inputs beside them), and what ran during the first trial (calls
        into the solution's extensions) and the process's peak memory. `share` (GPU): device outputs
        stay on the device (a reference keeps them, a candidate exports them: cuda_ipc.py)."""
        from .. import payload
        torch = self.torch
        blobs = []
        seen: dict = {}
        share = share and self.device == "cuda"
        for i, seed in enumerate(seeds):
            shape = shapes[i] if i < len(shapes) else {}
            inputs = self.make_inputs(seed, shape)
            before = input_digest(torch, inputs)
            calls_before = self.ext_calls[0]
            self.seed_forward(seed)
            with torch.no_grad():
                out = self.forward(inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
            if i == 0 and self.role == "candidate":
                seen["custom_calls"] = self.ext_calls[0] - calls_before
            seen["inputs_bytes"] = max(seen.get("inputs_bytes", 0),
                                       sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)))
            record = {"out": _plain(torch, out), "out_meta": _out_meta(torch, out)}
            # Most forwards never touch their inputs, which are often as big as the outputs: they
            # travel only when the call changed them (or the parent asks for the yardstick a
            # candidate that changed its own is judged by), the reference's pristine ones with them,
            # made again from the seed
            changed = input_digest(torch, inputs) != before
            if changed or with_inputs:
                record["inputs_after"] = _plain(torch, inputs)
            if self.role == "reference" and changed:
                record["inputs_before"] = _plain(torch, self.make_inputs(seed, shape))
            if share and self.role == "reference":
                kept: list = []
                blobs.append(payload.encode(torch, record, share=lambda t: kept.append(t) or {"kept": len(kept) - 1}))
                seen.update(self._keep(kept))
            elif share:
                blobs.append(payload.encode(torch, record, share=self._export))
            else:
                blobs.append(payload.encode(torch, record))
            del out, inputs, record
        peak = _rss("VmHWM")
        seen.update(work_rss_bytes=max(0, peak - self.base_rss) if peak and self.base_rss else None,
                    gpu_peak_bytes=int(torch.cuda.max_memory_reserved()) if self.device == "cuda" else None)
        return blobs, seen

    # a reference's kept trials: those of payload.TRIAL_CACHE_BYTES in all stay for the problem's
    # later solutions; of the rest the newest few, for the evaluations of the problem in flight at once
    TRANSIENT = 4

    def _keep(self, tensors: list) -> dict:
        self._tokens += 1
        token, n = self._tokens, sum(t.numel() * t.element_size() for t in tensors)
        self.kept[token] = tensors
        from ..payload import TRIAL_CACHE_BYTES
        persisted = sum(self.persisted.values()) + n <= TRIAL_CACHE_BYTES
        if persisted:
            self.persisted[token] = n
        transient = [k for k in self.kept if k not in self.persisted]
        for k in transient[:-self.TRANSIENT]:
            del self.kept[k]
        return {"kept": token, "kept_bytes": n, "persisted": persisted}

    def _export(self, t) -> Optional[dict]:
        """A candidate's device output, exported (cuda_ipc.export) and kept alive until its next
        command; None (its bytes travel instead) where the driver cannot export it."""
        from ..cuda_ipc import IpcError, export
        if not t.numel():
            return None
        try:
            node = export(t)
        except (IpcError, OSError):
            return None
        self.shared.append(t)
        return node

    def judge(self, cmd) -> dict:
        """Reference: a kept trial's outputs against a candidate's exported ones, on the device, with
        the parent's own comparison code (correctness.compare_tensors)."""
        from ..config import Tolerance
        from ..correctness import GPU_JUDGE_CHUNK, compare_tensors
        from ..cuda_ipc import IpcError, Mapped, Refused
        refs = self.kept.get(cmd.token)
        if refs is None:
            return {"gone": True}
        tol = Tolerance(atol=cmd.atol, rtol=cmd.rtol, rel_l2=cmd.rel_l2)
        results = []
        try:
            with Mapped(self.torch) as m:
                for p in cmd.pairs:
                    if not 0 <= p.ref_index < len(refs):
                        raise RuntimeError("no such kept output")
                    c = m.tensor(p.node, p.dtype, p.shape, p.nbytes)
                    ok, stats, reason = compare_tensors(c, refs[p.ref_index], tol, chunk=GPU_JUDGE_CHUNK)
                    results.append({"ok": ok, "reason": reason, "stats": stats})
                    del c
        except Refused as e:
            return {"refused": str(e)}
        except IpcError as e:
            return {"unmapped": str(e)}
        finally:
            if cmd.release:
                self.release(cmd.token)
        return {"results": results}

    def release(self, token: int) -> None:
        if token not in self.persisted:
            self.kept.pop(token, None)

    def release_cache(self) -> None:
        """A reference after its trials: its cached device blocks go back to the GPU, which the other
        evaluations on it share (an idle reference kept up to tens of GB of a problem's working set).
        Not after a timing command: the next round would pay cudaMalloc where the candidate does not."""
        if self.device == "cuda" and self.role == "reference":
            self.torch.cuda.empty_cache()

    def lint(self, cmd) -> dict:
        """The problem linter's runs, judged here on the device (the problem is trusted code)."""
        from ..lint_rules import analyse
        torch = self.torch
        outs = []
        params = 0
        for init_seed, seeds in ((cmd.init_seed, cmd.seeds), (cmd.init_seed_b, cmd.seeds[:1])):
            self.build(init_seed)
            params = sum(p.numel() for p in self.model.parameters()) if hasattr(self.model, "parameters") else 0
            with torch.no_grad():
                outs += [self.forward(self.make_inputs(s)) for s in seeds]
        flags, notes = analyse(*outs, params, cmd.atol, cmd.rtol, cmd.rel_l2)
        return {"flags": flags, "notes": notes}

    def start_profiler(self, method: Optional[str] = "cupti") -> dict:
        """Ready the kernel list: CUPTI's activity records called directly (cupti.py, milliseconds),
        or where that cannot be had, torch.profiler's start-up (start_profiler below, seconds). In
        the timed candidate's own process only after timing, for the same reason as kernels()."""
        t0 = time.perf_counter()
        # timing is over: hand back the NaN-filled block (_poison) and the rest of the cache, since
        # the slot starts another evaluation beside this one meanwhile (gate.background)
        self.torch.cuda.empty_cache()
        from ..cupti import KernelRecorder
        why = ""
        # one recorder per process, perhaps opened already for timing's spans or launch counts; the
        # profiler when asked for by name (correctness.kernel_list), whatever timing opened
        if method != "profiler" and self.recorder is None:
            self.recorder, why = KernelRecorder.open(self.torch)
        self.lister = self.recorder if method != "profiler" else None
        if self.lister is None:
            start_profiler()
        self.listing = "cupti" if self.lister else "torch.profiler"
        return {"profile_s": time.perf_counter() - t0,
                "notes": {"kernel_list": self.listing, **({"cupti_unavailable": why[:300]} if why else {})}}

    def kernels(self, seed: int) -> dict:
        """One forward on fresh inputs under CUPTI (readied by start_profiler): the names of the GPU
        kernels it ran. Never in a process that is still to be timed: once the profiler (CUPTI) has
        been attached, every later launch in this process costs more (7 -> 27 us per op measured on
        an H200 with torch.profiler), and a launch-bound candidate would be timed slower than its
        reference."""
        if self.listing is None:
            raise RuntimeError("kernels before profiler")
        t0 = time.perf_counter()
        inputs = self.make_inputs(seed)
        if self.lister is not None:
            try:
                self.lister.start()
            except Exception:  # noqa: BLE001 - CUPTI's fault, not the solution's: the profiler lists
                self.lister, self.listing = None, "torch.profiler"
                start_profiler()
        with self.torch.no_grad():
            if self.lister is not None:
                self.forward(inputs)
                names = sorted(set(self.lister.stop()))
            else:
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    self.forward(inputs)
                    self.torch.cuda.synchronize()
                names = sorted({e.name for e in prof.events() if getattr(e, "device_type", None) is not None
                                and "CUDA" in str(e.device_type)})
        return {"kernels_seen": names[:200], "profile_s": time.perf_counter() - t0,
                "notes": {"kernel_list": self.listing}}

    def span_recorder(self):
        """The process's CUPTI recorder for timing.loop.time_calls' kernel spans; None where CUPTI cannot
        be had (tried once)."""
        if self.recorder is None and self.span_why is None:
            from ..cupti import KernelRecorder
            self.recorder, self.span_why = KernelRecorder.open(self.torch)
        return self.recorder

    def quiet(self, probe_us: float, probes: int, max_s: float) -> dict:
        """The parent asks the reference's process (the problem's code, not a solution's)."""
        from ..timing.monitor import quiet_gpu
        return quiet_gpu(self.torch, probe_us, probes, max_s)

    def time(self, cmd) -> dict:
        from ..timing.loop import time_calls
        return time_calls(self, cmd.seeds, warmup=cmd.warmup, flush_l2=cmd.flush_l2, flush_method=cmd.flush_method, npos=cmd.sample_positions,
                          hold_us=cmd.hold_us, spans=cmd.spans,
                          variant=cmd.variant, graph=cmd.cuda_graph, inputs_path=cmd.inputs_path,
                          slots_path=cmd.slots_path, prints_of=cmd.prints_of, clock_timeout_s=cmd.clock_timeout_s)

    def serve_inputs(self, cmd) -> dict:
        """The reference's process only: a round's inputs for both sides (timing.inputs), and for a
        clocked round its slots (timing.clocked)."""
        from ..timing.clocked import Unclockable, prepare
        from ..timing.inputs import Unservable, write_round
        try:
            if cmd.clocked is None:
                return write_round(self, cmd.seeds, cmd.path, cmd.max_bytes)
            c = cmd.clocked
            return prepare(self, cmd.seeds, cmd.path, [(c.cand_slots, c.cand_owner), (c.ref_slots, None)],
                           [c.cand_snap, c.ref_snap], cmd.max_bytes)
        except Unservable as e:
            return {"unservable": str(e)}
        except Unclockable as e:
            return {"unclockable": str(e)}


class InterfaceError(Exception):
    pass


def _count_extension_calls(counter: list) -> None:
    """Wrap the functions of every extension the solution loads, to count calls into its own code
    (the evidence that a custom kernel ran, besides the profiler's kernel list on a GPU)."""
    import torch.utils.cpp_extension as cpp

    def wrap(loader):
        def wrapped(*args, **kwargs):
            mod = loader(*args, **kwargs)
            for name in dir(mod):
                fn = getattr(mod, name)
                if callable(fn) and not name.startswith("_") and not isinstance(fn, type):
                    setattr(mod, name, _counted(fn, counter))
            return mod
        return wrapped

    cpp.load_inline = wrap(cpp.load_inline)
    cpp.load = wrap(cpp.load)


def _counted(fn, counter):
    def call(*args, **kwargs):
        counter[0] += 1
        return fn(*args, **kwargs)
    call.__name__ = getattr(fn, "__name__", "ext_fn")
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def _shape_keys(meta: dict) -> set:
    keys = set(meta.get("small", {}))
    for s in meta.get("extra_shapes", []) or []:
        keys |= set(s)
    return keys


def _plain(torch, obj):
    if isinstance(obj, torch.Tensor):
        # .as_subclass strips any subclass, so the payload holds plain tensors only; the type itself
        # is reported separately (_out_meta) and judged by the parent
        return obj.detach().as_subclass(torch.Tensor)
    if isinstance(obj, (list, tuple)):
        return [_plain(torch, o) for o in obj]
    if isinstance(obj, (int, float, bool)) or obj is None:
        return obj
    return repr(type(obj))


DIGEST_CHUNK = 1 << 22  # elements per step: bounds the digest's own working memory to 64 MB


def input_digest(torch, inputs: list) -> list:
    """Per top-level tensor, two wrapping integer sums of its bits (plain, and weighted by position)
    on its own device: a change of any value, or of their order, changes them. It replaces a copy of
    every input, which doubled a forward's device memory (KernelBench level-1 inputs reach 17 GB).
    The candidate's own process computes its digest, as it computed the comparison before: a
    candidate that hides a change from it only loses the check of its own outputs' inputs."""
    from ..timing.hold import pinned
    total = pinned("sum", torch.sum)
    arange = pinned("arange", torch.arange)
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor):
            out.append(None)
            continue
        flat = x.detach().as_subclass(torch.Tensor).reshape(-1)
        words = flat.view(torch.int32) if (flat.numel() * flat.element_size()) % 4 == 0 and flat.numel() \
            else flat.view(torch.uint8)
        s1 = s2 = 0
        for off in range(0, words.numel(), DIGEST_CHUNK):
            w = words[off:off + DIGEST_CHUNK].to(torch.int64)
            pos = arange(off + 1, off + 1 + w.numel(), dtype=torch.int64, device=w.device)
            s1 += int(total(w))
            s2 += int(total(w.mul_(pos)))
        out.append((str(x.dtype), tuple(x.shape), s1, s2))
    return out


def _rss(key: str = "VmRSS") -> Optional[int]:
    """This process's resident memory now (VmRSS) or at its peak (VmHWM), from Linux's status file."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _out_meta(torch, obj) -> list[dict]:
    """What the parent needs to judge the output's form: exact type, device, dtype, shape."""
    if isinstance(obj, (list, tuple)):
        return [m for o in obj for m in _out_meta(torch, o)]
    t = type(obj)
    meta = {"type": f"{t.__module__}.{t.__qualname__}"}
    if t is not torch.Tensor and meta["type"] == "torch.Tensor":
        # a class may name itself anything: a subclass declared as torch.Tensor read as the real one
        # and passed at 17.6x, its work done lazily when the harness touched the output (a helper's attack)
        meta["type"] = f"a subclass named torch.Tensor ({t!r})"
    if isinstance(obj, torch.Tensor):
        meta.update(device=obj.device.type, dtype=str(obj.dtype), shape=list(obj.shape))
    return [meta]


def start_profiler() -> None:
    """One empty profiler session: CUPTI's start-up (4-6 s of host work on an H200 machine), after
    which a listing's own session takes milliseconds."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        pass
    prof.events()
