"""The config: harness/config.py holds every default and bound; configs/default.toml (the user's keys)
and configs/advanced.toml (the rest) document them and must not drift; a user file or override may
set any subset, a misspelt key is refused, and a renamed key still loads with a warning naming its new
name."""
from __future__ import annotations

import tomllib
import warnings

import pydantic
import pytest

from conftest import ROOT
from harness import config
from harness.config import Config, RenamedKeyWarning, load_config

DOCUMENTED = ("default.toml", "advanced.toml")


def _leaves(d: dict, prefix: str = "") -> dict:
    """{"timing.budget_s": 2.5, ...}: every leaf of a nested table, by dotted path."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_the_shipped_defaults_document_the_model_exactly_once():
    """Every key of configs/default.toml and configs/advanced.toml exists in the model with the
    model's default, and together they name every key of the model, each in one file only."""
    model = _leaves(Config().model_dump())
    model["cache_dir"] = Config.model_fields["cache_dir"].default  # "", made the user's own when a config is built
    seen: dict[str, str] = {}
    for name in DOCUMENTED:
        for key, value in _leaves(tomllib.loads((ROOT / "configs" / name).read_text())).items():
            assert key in model, f"configs/{name}: {key} is not a config key"
            assert value == model[key], f"configs/{name}: {key} = {value!r}, the model's default is {model[key]!r}"
            assert key not in seen, f"{key} is in both configs/{seen[key]} and configs/{name}"
            seen[key] = name
    assert set(seen) == set(model), f"not documented: {sorted(set(model) - set(seen))}"


def test_the_user_file_holds_few_keys():
    keys = _leaves(tomllib.loads((ROOT / "configs/default.toml").read_text()))
    assert len([k for k in keys if not k.startswith("correctness.tol.")]) <= 14


def test_loading_a_shipped_file_again_changes_nothing():
    digest = load_config().digest()
    for name in DOCUMENTED:
        assert load_config(ROOT / "configs" / name).model_dump() == load_config().model_dump()
    # the hash in every record (config_hash): it changes only where a default does, and then resumed
    # runs and leaderboards no longer mix records of the old default with the new
    assert digest == "59f65d44126ff78b"


def test_config_layers(tmp_path):
    user = tmp_path / "c.toml"
    user.write_text("[timing]\nbudget_s = 9.0\n")
    cfg = load_config(user, {"timing.warmup": 7, "device": "cpu"})
    assert (cfg.timing.budget_s, cfg.timing.warmup, cfg.device) == (9.0, 7, "cpu")
    assert cfg.timing.min_calls == load_config().timing.min_calls
    assert cfg.digest() != load_config().digest()


def test_a_user_file_mixes_the_users_and_the_advanced_keys_in_one_table(tmp_path):
    user = tmp_path / "c.toml"
    user.write_text('[timing]\nbudget_s = 1.0\nflush_method = "write"\n[correctness.tol.fp16]\natol = 0.1\n')
    cfg = load_config(user)
    assert (cfg.timing.budget_s, cfg.timing.flush_method) == (1.0, "write")
    # a partial tolerance table keeps the rest of its dtype's defaults, and the other dtypes
    assert (cfg.correctness.tol["fp16"].atol, cfg.correctness.tol["fp16"].rel_l2) == (0.1, 5e-3)
    assert set(cfg.correctness.tol) == {"fp32", "fp16", "bf16"}


def test_every_shipped_config_loads_and_unknown_keys_are_refused(tmp_path):
    shipped = sorted((ROOT / "configs").glob("*.toml"))
    assert len(shipped) >= 4
    for path in shipped:
        load_config(path)
    assert load_config(ROOT / "configs/fidelity.toml").timing.processes == 8
    assert load_config(ROOT / "configs/throughput.toml").timing.processes_when == "never"
    for bad in ("[timing]\nbudget = 1.0\n", "[batch]\nworkers = 2\n", "devices = 'cuda'\n", "[advanced]\nx = 1\n"):
        (tmp_path / "bad.toml").write_text(bad)
        with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
            load_config(tmp_path / "bad.toml")
    with pytest.raises(pydantic.ValidationError):
        load_config(None, {"timing.min_call": 3})
    # values that would pass a solution on fingerprints alone, or divide by zero in the timing loop
    for bad in ({"correctness.trials": 0}, {"timing.round_calls": 0}, {"timing.throttle_ratio": 1.5},
                {"correctness.tol.fp32.atol": -1.0}):
        with pytest.raises(pydantic.ValidationError):
            load_config(None, bad)


def test_a_renamed_key_loads_under_its_new_name_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setitem(config.RENAMED, "timing.flush", "timing.flush_method")
    monkeypatch.setitem(config.RENAMED, "sharing.lanes", "batch.concurrent_evaluations")
    user = tmp_path / "old.toml"
    user.write_text('[timing]\nflush = "write"\n[sharing]\nlanes = 2\n')
    with pytest.warns(RenamedKeyWarning) as got:
        cfg = load_config(user)
    assert (cfg.timing.flush_method, cfg.batch.concurrent_evaluations) == ("write", 2)
    messages = [str(w.message) for w in got]
    assert any("'timing.flush' is now 'timing.flush_method'" in m and str(user) in m for m in messages)
    assert any("'sharing.lanes' is now 'batch.concurrent_evaluations'" in m for m in messages)
    assert all(w.filename == __file__ for w in got)  # pointed at the caller, not at config.py
    # the same through an override, and the record holds only the new name
    with pytest.warns(RenamedKeyWarning) as got:
        cfg2 = load_config(None, {"timing.flush": "write", "sharing.lanes": 2})
    assert [str(w.message) for w in got] == ["override: config key 'timing.flush' is now 'timing.flush_method'",
                                             "override: config key 'sharing.lanes' is now 'batch.concurrent_evaluations'"]
    assert cfg2.model_dump() == cfg.model_dump() and cfg2.digest() == cfg.digest()
    assert "flush" not in cfg.model_dump()["timing"]
    # old and new both given: the old one is refused as unknown, after a warning that says why
    user.write_text('[timing]\nflush = "write"\nflush_method = "read"\n')
    with pytest.warns(RenamedKeyWarning, match="given too"), pytest.raises(pydantic.ValidationError, match="flush"):
        load_config(user)
    # no renamed key, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(None, {"timing.flush_method": "write"})


def test_a_renamed_key_is_shown_to_the_user(tmp_path):
    """DeprecationWarning is hidden outside __main__ by default; this one reaches the user's terminal
    as one line naming the new key, wherever load_config was called from."""
    import subprocess
    import sys
    user = tmp_path / "old.toml"
    user.write_text('[timing]\nflush = "write"\n')
    code = ("import harness.config as c, harness.cli as cli; c.RENAMED['timing.flush'] = 'timing.flush_method'; "
            f"print(cli._config({str(user)!r}).timing.flush_method)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "write", p.stderr
    assert "RenamedKeyWarning" in p.stderr and "'timing.flush' is now 'timing.flush_method'" in p.stderr


def test_the_cache_is_the_users_not_the_current_folders(monkeypatch, tmp_path):
    """No cache_dir in the config: $HARNESS_CACHE_DIR, else /var/cache/harness as root (reachable by
    the sandbox's uids, where a root's home is not), else $XDG_CACHE_HOME/harness. Never a folder
    under wherever the command was started."""
    from harness import config
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(config.os, "geteuid", lambda: 1000)
    assert load_config().cache_dir == str(tmp_path / "xdg" / "harness")
    monkeypatch.setattr(config.os, "geteuid", lambda: 0)
    assert load_config().cache_dir == "/var/cache/harness"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "mine"))
    assert load_config().cache_dir == str(tmp_path / "mine")
    assert load_config(None, {"cache_dir": "elsewhere"}).cache_dir == "elsewhere"  # the config's own wins


def test_the_precompiled_header_auto_is_on_for_a_gpus_batches_only():
    """`[batch] precompiled_header = "auto"`: a GPU's batches build many CUDA extensions, the CPU path
    few, and there the header's own build would share the cores with timing; true or false as said.
    Off by default."""
    from harness.config import load_config
    assert not load_config().batch.pch_for("cuda") and not load_config().batch.pch_for("cpu")
    auto = load_config(None, {"batch.precompiled_header": "auto"}).batch
    assert auto.pch_for("cuda") and not auto.pch_for("cpu")
    for value in (True, False):
        b = load_config(None, {"batch.precompiled_header": value}).batch
        assert b.pch_for("cuda") is value and b.pch_for("cpu") is value
