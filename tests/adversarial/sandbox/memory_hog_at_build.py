# memory_hog.py's build-time twin: the text "load_inline" (this comment is enough) sends the file
# through the build child, which imports it; at import it touches 2 GiB. The build's jail takes the
# same cap as the candidate's (hardening.jail_memory_gb): killed inside its group (runtime_error).
# Once the build jail had the default cap (half the host) whatever the config said (a helper's attack).
import torch
import torch.nn as nn

_hog = bytearray(2 << 30)
for _i in range(0, len(_hog), 4096):
    _hog[_i] = 1
del _hog


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
