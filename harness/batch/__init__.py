"""`harness batch`: many solutions, many problems, every GPU busy. The modules, in the order a run uses them:

- run.py        run_batch: the whole run, start to summary (and kill_children, compile_plan, the progress display)
- plan.py       which problem each solution file is for, and its label: Item, Skipped, BatchError
- devices.py    the GPUs CUDA will show (NVML or a torch child), a device slot per GPU, the machine's fingerprint
- runfolder.py  the run folder's files: results.jsonl (and reading it back for --resume), events.jsonl
- pipeline.py   the scheduler: which built solution goes to which slot next; outcomes into records
- executor.py   where the work runs: builds on CPU workers, evaluations on device slots (SlotRuntime)
- ray_backend.py  the same work on a Ray cluster (--backend ray): builds as tasks, each slot an actor
- sharing.py    several evaluations on one device, timing alone: DeviceGate, SoloGate
"""
