"""harness/inline_args.py: a solution's load_inline arguments read without running it. What it reads
is what torch receives when the file runs, and anything it cannot state as a constant makes the
file unknown, never a guess. CPU only."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT
from harness.inline_args import InlineBuild, extract

KNOWN = ["tests/fixtures/cpu/honest_cpp.py", "tests/fixtures/cpu/wrong_cpp.py",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "solutions").glob("*/*.py"))]


def _called_with(path, monkeypatch) -> list[InlineBuild]:
    """Run the file with torch's load_inline replaced by one that notes what it was given."""
    import torch.utils.cpp_extension as ce
    seen = []

    def note(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, extra_cuda_cflags=None,
             extra_ldflags=None, extra_include_paths=None, with_cuda=None, **_rest):
        def tup(v):
            return () if v is None else (v,) if isinstance(v, str) else tuple(v)
        seen.append(InlineBuild(name=name, cpp_sources=tup(cpp_sources), cuda_sources=tup(cuda_sources),
                                functions=None if functions is None else tup(functions),
                                extra_cflags=tup(extra_cflags), extra_cuda_cflags=tup(extra_cuda_cflags),
                                extra_ldflags=tup(extra_ldflags), extra_include_paths=tup(extra_include_paths),
                                with_cuda=with_cuda))
        return object()
    monkeypatch.setattr(ce, "load_inline", note)
    spec = importlib.util.spec_from_file_location("inline_args_subject", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "inline_args_subject", mod)
    spec.loader.exec_module(mod)
    return seen


@pytest.mark.parametrize("rel", KNOWN)
def test_what_is_read_is_what_torch_is_given(rel, monkeypatch):
    path = ROOT / rel
    got = extract(path.read_text())
    assert got, rel
    assert got == _called_with(path, monkeypatch)


HEAD = "from torch.utils.cpp_extension import load_inline\n"


def test_constants_through_names_joins_and_fstrings_are_read():
    src = HEAD + (
        "BLOCK = 256\n"
        "cuda_src = f'#define BLOCK {BLOCK}\\n' + '__global__ void k() {}'\n"
        "cpp_src = 'torch::Tensor f(torch::Tensor x);'\n"
        "FLAGS = ['-O3']\n"
        "mod = load_inline('ext', cpp_src, cuda_sources=[cuda_src], functions=['f'], extra_cuda_cflags=FLAGS + ['-lineinfo'],\n"
        "                  verbose=True, with_cuda=True)\n")
    assert extract(src) == [InlineBuild(name="ext", cpp_sources=("torch::Tensor f(torch::Tensor x);",),
                                        cuda_sources=("#define BLOCK 256\n__global__ void k() {}",), functions=("f",),
                                        extra_cuda_cflags=("-O3", "-lineinfo"), with_cuda=True)]
    assert extract("x = 1\n") == []


@pytest.mark.parametrize("why, src", [
    ("bound twice", "src = 'a'\nsrc += 'b'\nm = load_inline(name='e', cpp_sources=src)\n"),
    ("bound in a function too", "src = 'a'\ndef f():\n    global src\n    src = 'b'\nm = load_inline(name='e', cpp_sources=src)\n"),
    ("a call", "m = load_inline(name='e', cpp_sources=open('x.cpp').read())\n"),
    ("an f-string of a call", "m = load_inline(name='e', cpp_sources=f'{len([])}')\n"),
    ("**kwargs", "kw = {}\nm = load_inline(name='e', cpp_sources='a', **kw)\n"),
    ("its own build folder", "m = load_inline(name='e', cpp_sources='a', build_directory='/tmp/x')\n"),
    ("a loop's name", "for n in ['a', 'b']:\n    m = load_inline(name=n, cpp_sources='a')\n"),
    ("no sources", "m = load_inline(name='e')\n"),
    ("one known, one not", "a = load_inline(name='e', cpp_sources='a')\nb = load_inline(name='f', cpp_sources=str(a))\n"),
    ("not Python", "m = load_inline(name='e', cpp_sources='a'\n"),
])
def test_anything_not_a_stated_constant_makes_the_file_unknown(why, src):
    assert extract(HEAD + src) is None, why


def test_the_key_follows_the_build_not_the_python_around_it():
    ext = "m = load_inline(name='e', cpp_sources='int f();', functions=['f'], extra_cflags=['-O3'])\n"
    a = extract(HEAD + ext + "class ModelNew:\n    def forward(self, x):\n        return m.f(x)\n")
    b = extract("# another generation's prose and wrapper\n" + HEAD + ext + "class ModelNew:\n    pass\n")
    c = extract(HEAD + ext.replace("-O3", "-O2"))
    assert a == b and a[0].key("2.11.0", "cuda") == b[0].key("2.11.0", "cuda")
    assert a[0].key("2.11.0", "cuda") != c[0].key("2.11.0", "cuda")  # a flag
    assert a[0].key("2.11.0", "cuda") != a[0].key("2.11.0", "cpu")    # what it is built for
