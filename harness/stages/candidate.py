"""Stage 3: the candidate's processes. The first imports the solution and builds ModelNew from the
reference's secret seed; where a side is timed in several processes, further ones do the same for
timing only. Each comes from the batch slot's standby where there is one, else is spawned fresh."""
from __future__ import annotations

from typing import Optional

from ..build import child_env
from ..process.worker import Worker
from ..records.messages import BuildCommand
from ..reference import ReferenceSession
from ..timing.measure import warm_up
from .build import Built
from .context import Context, answer, ask, wait_load


class CandidateProcesses:
    """`first` runs the trials and the first timing pair; `further` are the timing-only ones. All of
    them are registered with the device slot's gate, which stops them while others are timed."""

    def __init__(self, ctx: Context, ref: ReferenceSession, built: Built):
        self.ctx, self.ref, self.built = ctx, ref, built
        self.setup = ref.setup_for("candidate", str(built.module))
        self.env = child_env(built.ext_dir, ctx.device, ctx.env_extra)
        self.first: Optional[Worker] = None
        self.further: list[Worker] = []

    @property
    def started(self) -> bool:
        return self.first is not None

    def _spawn(self, phase) -> Worker:
        """A candidate's process, stopped by others' timing from its start."""
        s = self.setup
        jail = None
        if self.ctx.jailed:
            from ..sandbox import JAILS
            from ..sandbox import memory_cap
            # never on the CPUs a reference is timed on (JAILS.keep_off)
            jail = JAILS.make(self.built.ext_dir, self.built.module, memory_cap(self.ctx.cfg.hardening.jail_memory_gb))
            s = s.model_copy(update={"jail": jail, "solution_path": jail.solution_path})
        try:
            if self.ctx.standby:
                w = self.ctx.standby.take(s, self.env, self.ctx.cfg.timeouts.load_s, on_worker=phase.add)
            else:
                w = Worker(s, env=self.env)
                phase.add(w)
        except BaseException:
            if jail is not None:
                JAILS.release(jail)
            raise
        if jail is not None:
            w.on_close.append(lambda: JAILS.release(jail))
        return w

    def start(self) -> None:
        """The first process: the solution imported, ModelNew built from the reference's seed."""
        cfg, gate = self.ctx.cfg, self.ctx.gate
        clock, phases = self.ctx.clock, self.ctx.phases
        with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
            t0 = clock()
            self.first = self._spawn(phase)
            gate.register(self.first)
            wait_load(self.first, cfg.timeouts.load_s, self.built.ext_dir)
            t1 = clock()
            ask(self.first, BuildCommand(init_seed=self.ref.plan.init_seed), cfg.timeouts.load_s,
                "building ModelNew")
        phases.load_process_s, phases.load_build_s = t1 - t0, clock() - t1

    def restart(self) -> Worker:
        """The first process replaced by a fresh one (a failed CUDA graph capture leaves torch half
        in capture mode in its process)."""
        self.first.kill()
        self.first.close(grace=0)  # its pipes and log reader too, not only the process group
        self.start()
        return self.first

    def more(self, n: int, spans: bool) -> list[Worker]:
        """`n` more processes, for timing only (timing.stats.processes_for): each imports the solution and
        builds ModelNew from the same seed; every timed call's output is checked against the
        reference's, as the first process's are. Returns all further processes so far."""
        cfg, gate, seed = self.ctx.cfg, self.ctx.gate, self.ref.plan.init_seed
        with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
            if self.ctx.standby:
                self.ctx.standby.reserve(n)
            new: list[Worker] = []
            for _ in range(n):  # each kept as it starts, so that close() reaches it if a later one fails
                new.append(self._spawn(phase))
                self.further.append(new[-1])
            gate.register(self.first, *self.further)
            for w in new:
                wait_load(w, cfg.timeouts.load_s, self.built.ext_dir)
            # each step sent to every process, then their replies read: they work at once
            sent = [(w, w.send(BuildCommand(init_seed=seed))) for w in new]
            for w, t0 in sent:
                answer(w, "build", t0, cfg.timeouts.load_s, "building ModelNew in a further process")
            sent = [(w, w.send(warm_up(cfg.timing, self.ref.rng, spans))) for w in new]
            for w, t0 in sent:
                answer(w, "time", t0, cfg.timeouts.run_s, "the first timing request of a further process")
        return list(self.further)

    def warm_up(self) -> None:
        """On a GPU, outside the timing phase: what the first process pays once for timing (CUPTI's
        start, the flush buffer, NVML), while every other evaluation on the GPU would wait."""
        ctx = self.ctx
        t0 = ctx.clock()
        with ctx.gate.stoppable(ctx.cfg.batch.slow_phase_frees_lane_s) as phase:
            phase.add(self.first)
            ask(self.first, warm_up(ctx.cfg.timing, self.ref.rng), ctx.cfg.timeouts.run_s, "the first timing request")
        ctx.phases.processes_s += ctx.clock() - t0

    def close(self) -> None:
        if self.first is None:
            return
        gate = self.ctx.gate
        gate.unregister()
        with gate.shared():  # its exit frees device memory: not beside a neighbour's timing
            for w in [self.first] + self.further:
                w.close()
