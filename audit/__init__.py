"""Predict, on Linux, which kernels ExecuTorch's Metal (AOTInductor) lowering of a model calls.

``shimkit audit`` runs the real path — ``torch.export``, ``to_edge_transform_and_lower`` with
``MetalPartitioner``, ``MetalBackend.preprocess`` and Inductor's cpp-wrapper codegen for mps — on fake
mps tensors, compiling nothing (:mod:`~shimkit.audit.fake_mps`), records each kernel the wrapper calls
(:mod:`~shimkit.audit.recorder`) and reports providers, missing kernels and fixes
(:mod:`~shimkit.audit.report`). See ``docs/audit.md``.

>>> from shimkit.audit import run_audit, to_json
>>> to_json(run_audit(["seed_split_linear"]))["models"][0]["status"]  # doctest: +SKIP
'clean'
"""

import importlib
from typing import Any

from shimkit._versions import check_versions

check_versions()  # as shimkit.registry and shimkit.passes do, before anything touches torch internals

# Imported on first use: ``shimkit --help`` reads the audit's command line without torch or executorch.
_EXPORTS = {
    "AuditEnvironmentError": "fake_mps", "check_torch_version": "fake_mps", "fake_mps_lowering": "fake_mps",
    "LoadedModel": "loader", "ModelLoadError": "loader", "load_model": "loader", "load_methods": "loader",
    "Lowering": "programs", "Program": "programs",
    "SCHEMA_VERSION": "report", "exit_code": "report", "render_text": "report", "to_json": "report",
    "AuditRun": "runner", "ModelAudit": "runner", "audit_loaded": "runner", "run_audit": "runner",
    "AuditOptions": "options", "Numerics": "options",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'shimkit.audit' has no attribute {name!r}")
    return getattr(importlib.import_module(f"shimkit.audit.{_EXPORTS[name]}"), name)
