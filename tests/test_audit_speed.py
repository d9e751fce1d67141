"""shimkit.audit.speed: the speed-ups must not change what the audit reports.

Zoo models of every kind the speed-ups touch (the ops whose decompositions they materialise once come
from convolutions, attention with a cache, dynamic sizes, sorting and spectral code) are audited with and
without them, with shimkit's plugins, and the two models with upstream gaps also with ``--no-plugins`` so
missing kernels, their nodes and fixes are compared too; the JSON reports must be identical except for
the timings. (The whole zoo, compared once, took two minutes of CI for the same finding.)
"""

import gc
import json
import os
import subprocess
import sys

import pytest
import torch._export.utils as export_utils
import torch.export.decomp_utils as decomp_utils
import torch.export.exported_program as exported_program

from shimkit.audit import run_audit, to_json
from shimkit._patching import ScopedPatches
from shimkit.audit.speed import cia_ops_materialized_once
from shimkit.backend import new_registry


def _registry():
    return new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})


def _without_timings(document):
    for model in document["models"]:
        model.pop("timings_s")
    return document


EVERY_KIND = ["mobilenet_v3_small", "decoder_kv_cache", "position_ids_dynamic", "sorted_routing", "stft_magnitude"]


@pytest.mark.parametrize("plugins, models", [(True, EVERY_KIND), (False, ["cumsum", "baddbmm"])],
                         ids=["zoo-with-plugins", "upstream-gaps-no-plugins"])
def test_speedups_report_exactly_what_the_plain_audit_reports(plugins, models):
    registry = _registry()
    plain = _without_timings(to_json(run_audit(models, plugins=plugins, registry=registry, speedups=False)))
    fast = _without_timings(to_json(run_audit(models, plugins=plugins, registry=registry, speedups=True)))
    assert [m["name"] for m in fast["models"]] == models
    for plain_model, fast_model in zip(plain["models"], fast["models"]):
        assert fast_model == plain_model, plain_model["name"]
    assert fast == plain
    if not plugins:  # the comparison covered missing kernels, not only clean models
        assert {m["status"] for m in fast["models"]} == {"missing"}


def test_speedups_leave_torch_as_it_was():
    originals = {
        (export_utils, "_materialize_cpp_cia_ops"): export_utils._materialize_cpp_cia_ops,
        (export_utils, "_collect_all_valid_cia_ops"): export_utils._collect_all_valid_cia_ops,
        (exported_program, "_collect_all_valid_cia_ops"): exported_program._collect_all_valid_cia_ops,
        (decomp_utils, "_collect_all_valid_cia_ops"): decomp_utils._collect_all_valid_cia_ops,
    }
    run_audit(["baddbmm"], plugins=True, registry=_registry())
    for (module, name), original in originals.items():
        assert getattr(module, name) is original, name


def test_cia_ops_are_materialized_once_per_collection_with_the_same_result(monkeypatch):
    expected = export_utils._collect_all_valid_cia_ops()
    calls = []
    materialize = export_utils._materialize_cpp_cia_ops
    monkeypatch.setattr(export_utils, "_materialize_cpp_cia_ops", lambda: calls.append(1) or materialize())
    patches = ScopedPatches()
    try:
        cia_ops_materialized_once(patches)
        assert exported_program._collect_all_valid_cia_ops() == expected
        assert len(calls) == 1  # torch makes one call per torch.ops namespace
        export_utils._materialize_cpp_cia_ops()  # outside a collection: runs as before
        assert len(calls) == 2
        assert decomp_utils._collect_all_valid_cia_ops() == expected
        assert len(calls) == 3
    finally:
        patches.undo()
    assert export_utils._materialize_cpp_cia_ops is not materialize  # the monkeypatched one is back
    export_utils._collect_all_valid_cia_ops()
    assert len(calls) > 4


def test_the_library_never_touches_the_garbage_collector(monkeypatch):
    """run_audit runs inside other people's processes: gc state is theirs (freeze, thresholds)."""
    def refuse(*args, **kwargs):
        raise AssertionError("run_audit changed the garbage collector's state")

    for name in ("freeze", "unfreeze", "disable", "enable", "set_threshold"):
        monkeypatch.setattr(gc, name, refuse)
    assert run_audit(["seed_split_linear"], plugins=True, registry=_registry()).models[0].status == "clean"


def _command_in_a_fresh_interpreter(*arguments: str) -> dict[str, int | bool]:
    """Runs ``shimkit audit ARGUMENTS`` in a new interpreter; what it left: the frozen object count, the exit
    status, whether the lowering modules were imported and whether every model's report came from the cache."""
    probe = ("import gc, sys\nfrom shimkit.audit.cli import main\n"
             "from shimkit.audit.speed import LOWERING_MODULES\n"
             f"code = main({list(arguments)!r} + ['--json'])\n"
             "lowering = all(name in sys.modules for name in LOWERING_MODULES)\n"
             "sys.stderr.write(f'frozen={gc.get_freeze_count()} code={code} lowering={int(lowering)}\\n')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
    line = [x for x in done.stderr.splitlines() if x.startswith("frozen=")]
    assert line, done.stderr[-3000:]
    left = {key: int(value) for key, value in (part.split("=") for part in line[-1].split())}
    return {**left, "cached": all(model.get("cached", False) for model in json.loads(done.stdout)["models"])}


def test_the_audit_command_freezes_the_heap_its_imports_left():
    left = _command_in_a_fresh_interpreter("--quiet", "--no-cache", "seed_split_linear")
    assert left["code"] == 0 and left["lowering"] and left["frozen"] > 100_000, left


def test_models_answered_from_the_cache_import_no_lowering_module(tmp_path):
    """ExecuTorch's exir and Inductor's wrapper codegen are 2.6 s of a cache hit's 6.6 s: models audited in
    the command's process, or in the workers it forks, are lowered, and so import and freeze them, only where
    the cache does not answer."""
    models = ("-j", "1", "seed_split_linear", "cumsum")  # one after the other, in the command's process
    missed = _command_in_a_fresh_interpreter("--quiet", "--cache-dir", str(tmp_path), *models)
    hit = _command_in_a_fresh_interpreter("--quiet", "--cache-dir", str(tmp_path), *models)
    assert missed["code"] == hit["code"] == 0, (missed, hit)
    assert not missed["cached"] and missed["lowering"] and missed["frozen"] > 100_000, missed
    assert hit["cached"] and not hit["lowering"] and hit["frozen"] > 100_000, hit
    assert missed["frozen"] > hit["frozen"] + 100_000, (missed, hit)  # the lowering modules' objects too
    # -j workers fork from the command's process: it imports no lowering module for them either.
    in_workers = _command_in_a_fresh_interpreter("--quiet", "--cache-dir", str(tmp_path), "-j", "2", *models[2:])
    assert in_workers["code"] == 0 and in_workers["cached"] and not in_workers["lowering"], in_workers
