"""shimkit.audit.speed: the speed-ups must not change what the audit reports.

The whole zoo is audited with and without them (with shimkit's plugins, and the two models with
upstream gaps also with ``--no-plugins`` so missing kernels, their nodes and fixes are compared too);
the JSON reports must be identical except for the timings.
"""

import gc
import weakref

import pytest
import torch._export.utils as export_utils
import torch.export.decomp_utils as decomp_utils
import torch.export.exported_program as exported_program

from shimkit.audit import run_audit, to_json
from shimkit.audit.fake_mps import ScopedPatches
from shimkit.audit.speed import cia_ops_materialized_once, young_heap_gc
from shimkit.audit.zoo import ZOO
from shimkit.registry import PluginRegistry


def _registry():
    return PluginRegistry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})


def _without_timings(document):
    for model in document["models"]:
        model.pop("timings_s")
    return document


@pytest.mark.parametrize("plugins, models", [(True, list(ZOO)), (False, ["cumsum", "baddbmm"])],
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


def test_speedups_leave_torch_and_the_collector_as_they_were():
    originals = {
        (export_utils, "_materialize_cpp_cia_ops"): export_utils._materialize_cpp_cia_ops,
        (export_utils, "_collect_all_valid_cia_ops"): export_utils._collect_all_valid_cia_ops,
        (exported_program, "_collect_all_valid_cia_ops"): exported_program._collect_all_valid_cia_ops,
        (decomp_utils, "_collect_all_valid_cia_ops"): decomp_utils._collect_all_valid_cia_ops,
    }
    run_audit(["baddbmm"], plugins=True, registry=_registry())
    for (module, name), original in originals.items():
        assert getattr(module, name) is original, name
    assert gc.isenabled() and gc.get_freeze_count() == 0


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


class _Node:
    pass


def test_young_heap_gc_collects_the_blocks_cycles_and_gives_the_heap_back():
    with young_heap_gc():
        assert gc.get_freeze_count() > 0
        cycle = _Node()
        cycle.self = cycle
        alive = weakref.ref(cycle)
        del cycle
    assert alive() is None  # collected on exit, not left for a later full collection
    assert gc.get_freeze_count() == 0


def test_young_heap_gc_leaves_a_callers_frozen_heap_alone():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with young_heap_gc():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
