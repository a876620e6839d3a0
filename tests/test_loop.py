"""The child's timed loop: harness/timing/loop.py (each call's kernel work from CUPTI's records, the
harness's own kernels left out) and harness/timing/hold.py (the launch hold's PTX)."""
from __future__ import annotations

import shutil

import pytest


HOLD, FLUSH = "harness_hold", "_ZN2at6native13reduce_kernelILi512E"


def test_call_work_leaves_out_the_harness_kernels_and_keeps_all_of_the_forward():
    from harness.timing.loop import call_work, span_of
    acts = [
        # call 1: hold, the flush's fill and reduction, then the forward's two kernels and a copy
        (100, 400, HOLD), (398, 399, "<memset>"), (400, 460, FLUSH), (470, 480, "k1"), (482, 490, "k2"),
        (491, 495, "<memcpy>"),
        # call 2: a kernel of the forward on its own stream, started during the hold, and one named
        # like the flush that runs before it: the earliest namesake goes, the real flush counts
        (1100, 1400, HOLD), (1150, 1160, "side"), (1200, 1210, FLUSH), (1399, 1400, "<memset>"), (1400, 1460, FLUSH),
        (1470, 1480, "k1"), (1481, 1482, "<memset>"),
        # call 3: nothing of the forward's
        (2100, 2400, HOLD), (2399, 2400, "<memset>"), (2400, 2460, FLUSH),
        (3000, 3001, "outside every window"),
    ]
    work = call_work(acts, [(0, 999), (1000, 1999), (2000, 2999)], [HOLD, "<memset>", FLUSH])
    spans = [span_of(w) for w in work]
    assert spans[0] == pytest.approx((495 - 470) / 1e6)
    assert spans[1] == pytest.approx((1482 - 1150) / 1e6)
    assert spans[2] == -1.0
    # what each call launched, the harness's own left out: its launch count (process_bias_us)
    assert [[a[2] for a in w] for w in work] == [["k1", "k2", "<memcpy>"], ["side", FLUSH, "k1", "<memset>"], []]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas (CUDA toolkit) on this machine")
def test_the_hold_kernel_assembles_and_fits_two_1024_thread_blocks_per_sm(tmp_path):
    """The hold is PTX the driver loads in each process (timing.hold._hold_kernel): it assembles for
    Hopper, its one entry is `harness_hold` (the name _hold_kernel looks up), and it needs no more
    than the 32 registers a thread that 2048 threads per SM leave (65536 per SM)."""
    import re
    import subprocess

    from harness.timing.hold import _HOLD_PTX
    src = tmp_path / "hold.ptx"
    src.write_text(_HOLD_PTX)
    out = subprocess.run(["ptxas", "-v", "-arch=sm_90", str(src), "-o", str(tmp_path / "hold.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Compiling entry function 'harness_hold'" in out.stderr
    regs = int(re.search(r"Used (\d+) registers", out.stderr).group(1))
    assert regs <= 32, out.stderr
