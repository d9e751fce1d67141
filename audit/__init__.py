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

from shimkit.audit.fake_mps import AuditEnvironmentError, check_torch_version, fake_mps_lowering
from shimkit.audit.loader import LoadedModel, ModelLoadError, load_model
from shimkit.audit.report import SCHEMA_VERSION, exit_code, render_text, to_json
from shimkit.audit.runner import AuditRun, ModelAudit, audit_loaded, run_audit

__all__ = [
    "AuditEnvironmentError", "AuditRun", "LoadedModel", "ModelAudit", "ModelLoadError", "SCHEMA_VERSION",
    "audit_loaded", "check_torch_version", "exit_code", "fake_mps_lowering", "load_model", "render_text",
    "run_audit", "to_json",
]
