"""The audit cache (shimkit.audit.cache): an unchanged model is answered from it, and any change to the
model, the options, or a plugin (its record, its decomposition's code, its kernel files) misses it."""

from __future__ import annotations

import argparse
import copy
import io
import json
import multiprocessing
import os
import textwrap
from datetime import datetime
from pathlib import Path

import pytest
import torch

from shimkit.audit.cache import AuditCache, audit_key, registry_fingerprint
from shimkit.audit.options import AuditOptions
from shimkit.audit.cli import configure_parser, run
from shimkit.backend import new_registry
from shimkit.store import file_digest

MODEL = textwrap.dedent("""
    import torch

    def model():
        return torch.nn.Sequential(torch.nn.Linear(8, WIDTH), torch.nn.ReLU()), (torch.randn(2, 8),)
""")


def audit(*argv: str) -> tuple[int, dict]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", "--json", *argv]),
               stdout=stdout, stderr=stderr)
    return code, json.loads(stdout.getvalue())


def test_a_rerun_answers_from_the_cache_and_a_changed_model_misses(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL.replace("WIDTH", "4"))
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = audit(*cache, f"{path}:model", "cumsum")[1]
    second = audit(*cache, f"{path}:model", "cumsum")[1]
    assert [m["cached"] for m in first["models"]] == [False, False]
    assert [m["cached"] for m in second["models"]] == [True, True] and second["summary"]["cached"] == 2
    strip = lambda m: {k: v for k, v in m.items() if k not in ("cached", "audited_at")}  # noqa: E731
    assert list(map(strip, second["models"])) == list(map(strip, first["models"]))
    # A cached answer says when its audit ran, not only how long it took then.
    assert all("audited_at" not in m for m in first["models"])
    assert all(datetime.fromisoformat(m["audited_at"]).tzinfo is not None for m in second["models"])
    path.write_text(MODEL.replace("WIDTH", "5"))
    assert [m["cached"] for m in audit(*cache, f"{path}:model", "cumsum")[1]["models"]] == [False, True]


def test_options_miss_and_no_cache_reads_and_writes_nothing(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    audit(*cache, "cumsum")
    assert audit(*cache, "--no-plugins", "cumsum")[1]["models"][0]["cached"] is False
    assert audit(*cache, "--check-numerics", "cumsum")[1]["models"][0]["cached"] is False
    assert audit(*cache, "cumsum")[1]["models"][0]["cached"] is True
    entries = sorted((tmp_path / "cache").rglob("entry.json"))
    assert len(entries) == 3
    code, document = audit("--no-cache", "--cache-dir", str(tmp_path / "unused"), "cumsum")
    assert document["models"][0]["cached"] is False and not (tmp_path / "unused").exists()


def test_workers_and_shards_use_the_cache(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    audit(*cache, "-j", "2", "cumsum", "baddbmm")
    code, document = audit(*cache, "-j", "2", "--shard", "2/2", "cumsum", "baddbmm")
    assert [(m["name"], m["cached"]) for m in document["models"]] == [("baddbmm", True)]


PLUGIN = textwrap.dedent('''
    import torch
    from shimkit.registry import OpPlugin, hookimpl

    def decompose(self, other):
        return self.abs() + BODY

    @hookimpl
    def shimkit_op_plugins():
        yield OpPlugin(name="my-hypot", ops=(torch.ops.aten.hypot.default,),
                       decompositions={"aten::hypot.default": decompose}, decomposition_devices=("mps",))
''')


def _fingerprint_with(tmp_path, name: str, body: str) -> str:
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(PLUGIN.replace("BODY", body))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
        registry.register(module, name="my_hypot")
        return registry_fingerprint(registry)
    finally:
        del sys.modules[name]


def test_a_plugin_whose_decomposition_changes_misses(tmp_path):
    builtins = registry_fingerprint(new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    first = _fingerprint_with(tmp_path / ".", "plugin_a", "other.abs()")
    (tmp_path / "b").mkdir()
    same = _fingerprint_with(tmp_path / "b", "plugin_a", "other.abs()")
    (tmp_path / "c").mkdir()
    changed = _fingerprint_with(tmp_path / "c", "plugin_a", "other.abs() * 1")
    assert first == same != changed and builtins not in (first, changed)
    blocked = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1", "SHIMKIT_BLOCK_PLUGINS": "cumsum"})
    assert registry_fingerprint(blocked) != builtins


def test_the_key_covers_shapes_dynamic_ranges_and_weights_with_numerics():
    registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})

    def key(exported, inputs, check_numerics=False):
        return audit_key(exported, inputs, AuditOptions(numerics=check_numerics), registry)

    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    exported = torch.export.export(model, (x,))
    assert key(exported, (x,)) == key(torch.export.export(model, (x,)), (x,))
    assert key(exported, (x,)) != key(torch.export.export(model, (torch.randn(5, 4),)), (x,))
    batch = torch.export.Dim("batch", min=1, max=64)
    dynamic = key(torch.export.export(model, (x,), dynamic_shapes=({0: batch},)), (x,))
    narrower = key(torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", max=32)},)),
                   (x,))
    assert len({key(exported, (x,)), dynamic, narrower}) == 3
    heavier = copy.deepcopy(model)  # an exported program shares its module's parameters
    with torch.no_grad():
        heavier.weight.add_(1)
    changed = torch.export.export(heavier, (x,))
    assert key(changed, (x,)) == key(exported, (x,))  # weights do not change a fake-device audit
    assert key(changed, (x,), True) != key(exported, (x,), True)
    assert key(exported, (x + 1,), True) != key(exported, (x,), True)


def test_zero_dimensional_weights_of_any_size_are_keyed_with_numerics():
    # BatchNorm's num_batches_tracked is a 0-d int64 buffer: a 0-d tensor cannot be viewed as bytes of
    # another size, which ended every BatchNorm model's audit with --check-numerics on the H100.
    registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
    model, x = torch.nn.BatchNorm1d(3).eval(), torch.ones(2, 3)
    exported = torch.export.export(model, (x,))

    def key(program):
        return audit_key(program, (x, torch.tensor(2.5)), AuditOptions(numerics=True), registry)

    before = key(exported)
    tracked = copy.deepcopy(model)
    tracked.num_batches_tracked.fill_(7)
    assert before == key(torch.export.export(model, (x,))) != key(torch.export.export(tracked, (x,)))


def _entry(**fields) -> dict:
    return {"status": "clean", "kernels": [], "missing": [], **fields}


def _hammer(directory: str, worker: int) -> None:
    cache = AuditCache(directory)
    for round_ in range(200):
        cache.put(f"{round_ % 7:02d}" * 32, _entry(worker=worker, round=round_, payload="x" * 20000))
        entry = cache.get(f"{round_ % 7:02d}" * 32)
        assert entry is not None and len(entry["payload"]) == 20000


def test_a_model_the_cache_cannot_key_is_audited_and_not_stored(tmp_path, monkeypatch, capsys):
    import shimkit.audit.entry as entry_module

    def unkeyable(*args, **kwargs):
        raise TypeError("cannot hash this weight")

    monkeypatch.setattr(entry_module, "audit_key", unkeyable)
    code, document = audit("--cache-dir", str(tmp_path / "cache"), "cumsum")
    assert code == 0 and document["models"][0]["status"] == "clean" and document["models"][0]["cached"] is False
    assert not list((tmp_path / "cache").rglob("*.json"))
    assert "cumsum is not cached: its cache key failed: TypeError: cannot hash this weight" in capsys.readouterr().err


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_hammer, args=(str(tmp_path), w)) for w in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert [w.exitcode for w in writers] == [0, 0, 0, 0]
    assert AuditCache(tmp_path).get("00" * 32)["payload"] == "x" * 20000
    entries = [p for p in (tmp_path / "audit").iterdir() if p.is_dir()]
    assert len(entries) == 7 and all(sorted(os.listdir(e)) == ["entry.json", "manifest.json"] for e in entries)


def _entry_file(cache: AuditCache) -> Path:
    [path] = (cache.directory / "audit").rglob("entry.json")
    return path


@pytest.mark.parametrize("damage", ["truncated", "garbled", "foreign", "without status"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(tmp_path, damage, capsys):
    cache = AuditCache(tmp_path)
    cache.put("cd" * 32, _entry())
    path = _entry_file(cache)
    text = path.read_text()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbled":
        path.write_text(text.replace("clean", "CLEAN"))
    else:
        # Written with a matching manifest, as a planted or stale entry would be: the check is on content.
        stored = json.loads(text)
        stored["key" if damage == "foreign" else "entry"] = "other" if damage == "foreign" else {"kernels": []}
        os.chmod(path, 0o600)
        path.write_text(json.dumps(stored))
        manifest = path.parent / "manifest.json"
        recorded = json.loads(manifest.read_text())
        recorded["files"]["entry.json"] = {"size": path.stat().st_size, "sha256": file_digest(path)}
        manifest.write_text(json.dumps(recorded))
    assert AuditCache(tmp_path).get("cd" * 32) is None
    AuditCache(tmp_path).put("cd" * 32, _entry(again=True))
    assert {k: v for k, v in AuditCache(tmp_path).get("cd" * 32).items() if k != "audited_at"} == _entry(again=True)
