# Wrong outputs (zeros) that pass by planting code the reference runs as root: at import, a jailed
# solution writes a `harness` package into the current folder where that folder is writable to it
# (a harness started from /tmp or a scratch folder). A child started as `python -m harness...` has its
# current folder first on its path, so the reference, started after the candidate's import, would
# import the planted package (which loads the real harness, then makes torch.relu return zeros) and
# compute zeros too. Children start with -P (no current folder on the path) and PYTHONPATH has no
# empty entry: the plant is never imported. Found by a helper's attack; run by tests/test_sandbox.py.
import os

import torch
import torch.nn as nn

_d = os.path.join(os.getcwd(), "harness")
try:
    os.makedirs(_d, exist_ok=True)
    with open(os.path.join(_d, "__init__.py"), "w") as fh:
        fh.write(
            "import os\n"
            "_real = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep)\n"
            "         if p and os.path.isdir(os.path.join(p, 'harness')) and os.path.realpath(p) != os.getcwd()]\n"
            "__path__ = [os.path.join(_real[0], 'harness')]\n"
            "exec(compile(open(os.path.join(__path__[0], '__init__.py')).read(), __path__[0], 'exec'))\n"
            "import torch\n"
            "torch.relu = lambda x: x * 0\n")
    os.chmod(_d, 0o777)
except OSError:
    pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
