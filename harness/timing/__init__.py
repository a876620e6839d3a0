"""Timing a candidate against its reference. Where to find what:

- the child's timing loop (one timed call per seed, events and kernel spans): timing/loop.py
- the CPU path's clocked rounds (a forward's calls, under 20 ms, timed by a clock process): timing/clocked.py
- the parent's measurement (alternating rounds, warm-up, pooling process pairs): timing/measure.py
- statistics and the process-bias model (how many processes a side is timed in): timing/stats.py
- the host-clock cross-checks of a measurement (unsynced_stream, timer_mismatch): timing/clocks.py
- NVML readings of the GPU, host run-queue/steal monitoring, waiting for a quiet GPU: timing/monitor.py
- output fingerprints (child) and comparing them with the reference's (parent): timing/fingerprint.py
- pinned primitives, the PTX launch-hold kernel, the persisting-L2 reset: timing/hold.py
"""
