"""Does where a small kernel's buffers lie change its cold time? (#5: relu on 64K floats spread 5.9%
between fresh processes while one process spread 0.8%.)

One process. relu(x) on 64K floats, timed cold as the harness does (256 MB read flush, then events
around the call), with x placed at 12 offsets in one pool: for each offset 3 blocks of 150 calls,
interleaved, medians in us. If the medians differ between offsets by more than between blocks of one
offset, placement is a per-process bias that fresh processes draw at random.
Usage: python bench/diag/address_luck.py  (prints a table and one JSON line)"""
import json
import random
import statistics

import torch

N = 1 << 16
torch.manual_seed(0)
flush_buf = torch.zeros((256 << 20) // 4, device="cuda")
sink = torch.empty((), device="cuda")
pool = torch.randn(64 << 20 >> 2, device="cuda")  # 64 MB
rng = random.Random(1)
offsets = [0, 64, 1024, 4096 // 4, (64 << 10) // 4, (2 << 20) // 4 - N // 2] + \
    [rng.randrange(0, (60 << 20) // 4) // 64 * 64 for _ in range(6)]
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def block(off, calls=150):
    x = pool[off:off + N]
    ts = []
    for _ in range(calls):
        torch.sum(flush_buf, 0, out=sink)
        start.record()
        y = torch.relu(x)
        end.record()
        torch.cuda.synchronize()
        ts.append(start.elapsed_time(end) * 1e3)
        del y
    return statistics.median(ts)


for off in offsets:  # warm-up
    block(off, 20)
meds = {off: [] for off in offsets}
for _ in range(3):
    for off in offsets:
        meds[off].append(block(off))
print(f"{'offset bytes':>14} {'addr mod 2MB':>12} " + " ".join(f"{'block' + str(i):>8}" for i in range(3)) + "   median")
for off in offsets:
    addr = pool[off:].data_ptr()
    print(f"{off * 4:14d} {addr % (2 << 20):12d} " + " ".join(f"{m:8.3f}" for m in meds[off])
          + f"  {statistics.median(meds[off]):7.3f}")
per_off = [statistics.median(v) for v in meds.values()]
within = max(max(v) / min(v) - 1 for v in meds.values())
print(f"spread between offsets {max(per_off) / min(per_off) - 1:.2%}; worst spread within one offset {within:.2%}")
print(json.dumps({"between": max(per_off) / min(per_off) - 1, "within": within,
                  "medians_us": {str(k * 4): v for k, v in meds.items()}}))
