# expect: status=incorrect flags=no_custom_kernel maybe=timed_output_mismatch
# problem: tests/problems/relu_add.py
# device: cuda
# Caches outputs by input data_ptr, the hack that fakes large speedups where timed calls reuse input
# buffers. The caching allocator often hands back the same addresses for fresh inputs, so the cache
# "hits" with a stale answer: caught by a correctness trial or by the fingerprint of a timed call.
import torch
import torch.nn as nn

_cache = {}


class ModelNew(nn.Module):
    def forward(self, a, b):
        key = (a.data_ptr(), b.data_ptr())
        if key not in _cache:
            _cache[key] = torch.relu(a + b)
        return _cache[key]
