"""harness/cupti.py without a GPU: the records it reads back, from buffers laid out as CUPTI's
concurrent-kernel records are, handed over by a stand-in for libcupti. (On a GPU, test_gpu.py lists
real kernels through it and checks it against torch.profiler.)"""
from __future__ import annotations

import ctypes

import pytest

from harness import cupti


class FakeCupti:
    """The four libcupti entry points KernelRecorder calls, over records built in Python."""

    def __init__(self, records: list[bytes]):
        self.records = records
        self.enabled: list[int] = []
        self.registered = None
        self._pending: list[tuple[int, int]] = []

    def cuptiActivityRegisterCallbacks(self, request, complete):
        self.registered = (request, complete)
        return 0

    def cuptiActivityEnable(self, kind):
        self.enabled.append(kind)
        return 0

    def cuptiActivityDisable(self, kind):
        self.enabled.remove(kind)
        return 0

    def cuptiActivityFlushAll(self, flag):
        """Hand the records over as CUPTI does: into a buffer the recorder asked for."""
        if not self.records:
            return 0
        request, complete = self.registered
        buf, size, maxrec = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        request(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(maxrec))
        offset = 0
        self._pending = []
        for rec in self.records:
            ctypes.memmove(buf.value + offset, rec, len(rec))
            self._pending.append((buf.value + offset, len(rec)))
            offset += len(rec)
        self.records = []
        complete(None, 0, buf.value, size.value, offset)
        return 0

    def cuptiActivityGetNextRecord(self, buf, valid, rec_ref):
        if not self._pending:
            return 1  # CUPTI_ERROR_MAX_LIMIT_REACHED: no more records
        addr, _ = self._pending.pop(0)
        rec_ref._obj.value = addr
        return 0


class FakeTorch:
    class cuda:
        @staticmethod
        def synchronize():
            pass


NAMES = []  # keeps the C strings the records point at alive


def record(kind: int, name: str, grid: int = 4, block: int = 256, start: int = 0, end: int = 0) -> bytes:
    raw = bytearray(cupti.NAME + 8 + 16)
    raw[0:4] = kind.to_bytes(4, "little")
    raw[cupti.START:cupti.START + 8] = start.to_bytes(8, "little")
    raw[cupti.END:cupti.END + 8] = end.to_bytes(8, "little")
    raw[cupti.GRID_X:cupti.GRID_X + 4] = grid.to_bytes(4, "little", signed=True)
    raw[cupti.BLOCK_X:cupti.BLOCK_X + 4] = block.to_bytes(4, "little", signed=True)
    s = ctypes.create_string_buffer(name.encode())
    NAMES.append(s)
    raw[cupti.NAME:cupti.NAME + 8] = ctypes.addressof(s).to_bytes(8, "little")
    return bytes(raw)


def test_kernel_records_are_read_by_name_and_others_are_skipped():
    lib = FakeCupti([record(cupti.CONCURRENT_KERNEL, "_Z9my_kernelPfS_i"),
                     record(5, "a memcpy, another kind of record"),
                     record(cupti.CONCURRENT_KERNEL, "harness_copy")])
    rec = cupti.KernelRecorder(lib, FakeTorch, "fake")
    rec.start()
    assert lib.enabled == [cupti.CONCURRENT_KERNEL]
    assert rec.stop() == ["_Z9my_kernelPfS_i", "harness_copy"]
    assert lib.enabled == [] and rec._bad == 0


def test_a_record_that_does_not_read_as_a_kernel_is_counted_not_listed():
    """A CUPTI whose record layout differs from the one this reads: the fields read at the kernel's
    offsets are not a launch's (no block of threads), so the name is not trusted; KernelRecorder.open
    then fails its canary and the profiler lists instead."""
    lib = FakeCupti([record(cupti.CONCURRENT_KERNEL, "real_kernel"),
                     record(cupti.CONCURRENT_KERNEL, "garbage", block=0),
                     record(cupti.CONCURRENT_KERNEL, "garbage too", grid=-7)])
    rec = cupti.KernelRecorder(lib, FakeTorch, "fake")
    rec.start()
    assert rec.stop() == ["real_kernel"]
    assert rec._bad == 2


def test_span_mode_keeps_start_and_end_of_kernels_copies_and_fills():
    """Kernel spans (timing.call_work) rest on these: every kernel, copy and fill with its start and
    end; a record whose end precedes its start is not trusted."""
    lib = FakeCupti([record(cupti.CONCURRENT_KERNEL, "k1", start=1000, end=3000),
                     record(cupti.MEMCPY, "", start=3500, end=4000),
                     record(cupti.MEMSET, "", start=4100, end=4200),
                     record(cupti.MEMCPY2, "", start=4300, end=4400),
                     record(5, "another kind", start=1, end=2),
                     record(cupti.CONCURRENT_KERNEL, "backwards", start=9000, end=8000)])
    rec = cupti.KernelRecorder(lib, FakeTorch, "fake")
    rec.start(spans=True)
    assert sorted(lib.enabled) == sorted([cupti.CONCURRENT_KERNEL, cupti.MEMCPY, cupti.MEMSET, cupti.MEMCPY2])
    assert rec.stop() == ["k1", "backwards"]
    assert lib.enabled == []
    assert rec.spans == [(1000, 3000, "k1"), (3500, 4000, "<memcpy>"), (4100, 4200, "<memset>"), (4300, 4400, "<memcpy>")]
    assert rec._bad == 1
    rec.start()  # a kernel listing keeps no spans and enables kernels only
    assert rec.spans is None and lib.enabled == [cupti.CONCURRENT_KERNEL]
    rec.stop()


def test_no_libcupti_means_no_recorder_and_a_reason(monkeypatch):
    monkeypatch.setattr(cupti, "library_paths", lambda torch: [])
    rec, why = cupti.KernelRecorder.open(FakeTorch)
    assert rec is None and "not found" in why


TORCH_ELEMENTWISE = "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_49_GLOBAL__N__d2ba64fb_1"
TORCH_REDUCE = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_"


@pytest.mark.parametrize("defined,seen,expected", [
    # a name of the solution's inside a library kernel's name is not the solution's kernel
    ("elementwise_kernel", TORCH_ELEMENTWISE, False),
    ("vectorized_elementwise_kernel", TORCH_ELEMENTWISE, False),
    ("reduce_kernel", TORCH_REDUCE, False),
    ("kernel", "_Z9my_kernelPf", False),
    ("elementwise_kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::foo>(int)", False),
    ("vectorized_elementwise_kernel", "void at::native::vectorized_elementwise_kernel<4, foo>(int)", False),
    # the solution's own, as CUPTI (mangled) or the profiler (demangled) names it
    ("reduce_kernel", "_Z13reduce_kernelPKfPfi", True),
    ("my_kernel", "_Z9my_kernelIfEvPT_", True),
    ("my_kernel", "_ZN2ns9my_kernelEPf", True),
    ("relu_add_kernel", "relu_add_kernel", True),
    ("relu_add_kernel", "void relu_add_kernel(float const*, float*, long)", True),
    ("my_kernel", "void ns::my_kernel<float>(float*)", True),
])
def test_a_kernel_ran_only_when_its_whole_name_is_listed(defined, seen, expected):
    from harness.kernels import ran
    assert ran([defined], [seen]) is expected
    assert ran([defined], ["_Z5otherv", seen]) is expected
