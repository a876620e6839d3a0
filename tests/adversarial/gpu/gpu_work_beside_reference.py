# expect: status=passed flags=gpu_work_after_round,stream_creation,thread_creation maybe=no_custom_kernel,short_kernel
# problem: problems/level1/01_matmul_square.py
# device: cuda
# The reference slowed from outside the candidate's interval: the candidate's forward is the
# reference's own matmul, but a thread of its extension (no Python, no GIL) watches its main thread
# through /proc/self/task/<pid>/syscall and, the moment that thread blocks reading its next command
# (the round is over), launches a kernel on a stream of its own that spins until the thread is told
# to run again (at most 60 ms). Frozen, the process runs no code, but the kernel runs on, and the GPU
# time-slices it with the reference's round: the reference's 2.7 ms matmul took about twice as long
# on an H200 (bench/diag/gpu_beside.py). With the drain (hardening.gpu_drain_s) the parent locks the
# process before freezing it, which waits for the kernel: the reference is timed on a quiet GPU, the
# speedup is the honest 1.0, and the wait is flagged (tests/test_gpu.py times it without the drain too).
# thread_creation is the static check's descriptive flag for the native thread.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <thread>

__global__ void spin(volatile int* stop, long long max_ns) {
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (*stop == 0 && t - t0 < max_ns);
}

static volatile int* h_stop = nullptr;
static int* d_stop = nullptr;
static cudaStream_t side;

// the main thread blocked in read(2): "0 0x..." (a running thread reads "running")
static bool main_waits(int fd) {
    char buf[64];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    return n > 2 && buf[0] == '0' && buf[1] == ' ';
}

static void watch(int device, int fd) {
    cudaSetDevice(device);
    bool spinning = false;
    int seen = 0;
    for (;;) {
        if (main_waits(fd)) {
            if (++seen >= 2 && !spinning) {
                *h_stop = 0;
                spin<<<1, 32, 0, side>>>(d_stop, 60000000LL);
                spinning = true;
            }
        } else {
            seen = 0;
            if (spinning) { *h_stop = 1; spinning = false; }
        }
        usleep(20);
    }
}

void start_watch() {
    static bool started = false;
    if (started) return;
    started = true;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaHostAlloc((void**)&h_stop, sizeof(int), cudaHostAllocMapped);
    *h_stop = 1;
    cudaHostGetDevicePointer((void**)&d_stop, (void*)h_stop, 0);
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    char path[64];
    // put together at run time, past the static rule on reading another task's state
    snprintf(path, sizeof path, "/%s%c/%s/%s%s/%d/%s", "pro", 'c', "self", "ta", "sk", (int)getpid(), "syscall");
    int fd = open(path, O_RDONLY);
    if (fd >= 0) std::thread(watch, dev, fd).detach();
}
"""

ext = load_inline(name="fx_gpu_work_beside_reference", cpp_sources="void start_watch();", cuda_sources=cuda_src,
                  functions=["start_watch"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        ext.start_watch()
        return torch.matmul(A, B)
