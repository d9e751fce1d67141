"""Speed-ups of the audit that leave the lowering path, and so the recorded kernels, unchanged.

Neither skips, reorders or reconfigures a step of the real path; each removes work whose result is
already known. ``tests/test_audit_speed.py`` audits the whole zoo with and without them and requires
identical reports. ``benchmarks/bench_audit.py`` measures them (docs/audit.md, "Speed").

* :func:`freeze_imported_heap` — for the ``shimkit audit`` command only, where the process is
  shimkit's own. A process that has imported torch, Inductor and ExecuTorch holds about half a
  million tracked objects that no model's lowering frees; every full collection (about one per
  CNN-sized model) walked all of them, 0.2–0.3 s each. The command moves them to the permanent
  generation after its imports, the way CPython's documentation advises for a server before it
  forks, and again after the lowering modules where it imports those only for a model the audit
  cache did not answer (:func:`lowering_ahead`). The library
  (:func:`~shimkit.audit.runner.run_audit`) never touches the collector: in a user's process (a
  notebook, a pytest run, a server) the collector's state is not shimkit's.
* :func:`cia_ops_materialized_once` — ``ExportedProgram.run_decompositions`` and ExecuTorch's
  decomposition table ask torch for every CompositeImplicitAutograd op
  (``torch._export.utils._collect_all_valid_cia_ops``), twice per model. That walks each of the ~40
  ``torch.ops`` namespaces and, for each, materialises all ~840 CIA registrations of the C++
  dispatcher again (``_materialize_cpp_cia_ops``), 38 identical passes per call, about 0.05 s.
  Within one such call nothing registers operators, so the first pass is kept and the repeats are
  skipped; the walk itself, and every call of it, still happens.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

from shimkit._patching import ScopedPatches


# What lowering imports besides what loading and exporting a model do: 2.6 of the 6.6 s a model answered
# from the audit cache took (so they are left to the first model lowered, :func:`lowering_ahead`).
LOWERING_MODULES = ("executorch.exir", "torch._inductor.codegen.cpp_wrapper_cpu")

_command_process = False  # whether freeze_imported_heap was called: the process is the audit command's


def freeze_imported_heap(*, lowering: bool = True) -> None:
    """Move every object alive now to the collector's permanent generation (``gc.freeze``), for the
    rest of the process. Call it after the heavy imports, only from a process shimkit owns.

    With ``lowering`` the lowering modules are imported first, so that they are frozen too; without it
    (models the audit cache may answer) :func:`lowering_ahead` imports and freezes them if a model is
    lowered after all."""
    global _command_process
    _command_process = True
    if lowering:
        for lowering_module in LOWERING_MODULES:
            importlib.import_module(lowering_module)
    gc.collect()
    gc.freeze()


def lowering_ahead() -> None:
    """Call where a model is about to be lowered. In the audit command's process, whose heap was frozen
    before the lowering modules were imported, it imports them and freezes what they left; anywhere else
    (the library, in a user's process) it does nothing."""
    if _command_process and any(name not in sys.modules for name in LOWERING_MODULES):
        freeze_imported_heap()


def cia_ops_materialized_once(patches: ScopedPatches) -> None:
    """Within one ``_collect_all_valid_cia_ops`` call, materialise the dispatcher's CIA ops once.

    ``_materialize_cpp_cia_ops`` does ``getattr(torch.ops.<ns>.<op>, <overload>)`` for every
    CompositeImplicitAutograd registration: idempotent, and the registrations cannot change while
    the collection walks ``torch.ops`` (it only reads). torch calls it once per namespace; the
    repeats are dropped. Calls outside a collection run as before. Patched for the audit's duration
    through ``patches``; a torch without these functions is left alone.
    """
    try:
        import torch._export.utils as export_utils
        import torch.export.decomp_utils as decomp_utils
        import torch.export.exported_program as exported_program
    except ImportError:
        return
    collect = getattr(export_utils, "_collect_all_valid_cia_ops", None)
    materialize = getattr(export_utils, "_materialize_cpp_cia_ops", None)
    if collect is None or materialize is None:
        return
    state: dict[str, Any] = {"collecting": False, "done": False}

    def materialize_once() -> None:
        if state["collecting"] and state["done"]:
            return
        materialize()
        state["done"] = state["collecting"]

    def collect_all_valid_cia_ops():
        if state["collecting"]:  # re-entered: leave the outer call's bookkeeping alone
            return collect()
        state["collecting"], state["done"] = True, False
        try:
            return collect()
        finally:
            state["collecting"], state["done"] = False, False

    patches.replace(export_utils, "_materialize_cpp_cia_ops", materialize_once)
    for module in (export_utils, exported_program, decomp_utils):
        if getattr(module, "_collect_all_valid_cia_ops", None) is collect:
            patches.replace(module, "_collect_all_valid_cia_ops", collect_all_valid_cia_ops)
