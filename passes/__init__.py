"""Composable FX graph passes for AOTInductor-based ExecuTorch backends.

Every pass is a torch.fx ``PassBase`` returning ``PassResult(graph_module, modified)``, and is callable
the way ``AotiBackend.preprocess`` calls custom passes: on a ``GraphModule``, or on the
``ExportedProgram`` when it sets ``requires_exported_program``. See ``docs/passes.md``.

>>> from shimkit.passes import Pipeline
>>> pipeline = shimkit.backend.pipeline("mps")  # the passes the registry's plugins contribute  # doctest: +SKIP
>>> pipeline(edge_program)                                                                 # doctest: +SKIP
"""

from shimkit._versions import check_versions

VERSIONS = check_versions()  # before the passes import torch.fx and executorch internals

from shimkit.passes.addmm import AddmmPolicy
from shimkit.passes.base import PassContext, PassError, PassResult, ShimkitPass, describe_node
from shimkit.passes.decompose import DecomposeInPlace
from shimkit.passes.float64 import Float64AsFloat32, PrecisionChange, lower_float64_as_float32
from shimkit.passes.linear import DecomposeLinear
from shimkit.passes.pipeline import PassRecord, Pipeline, PipelineError, PipelineReport, count_ops
from shimkit.passes.view_replacement import VIEW_OF_COPY, ReplaceViewCopyWithView

__all__ = [
    "AddmmPolicy", "DecomposeInPlace", "DecomposeLinear", "Float64AsFloat32", "PassContext", "PassError",
    "PassRecord", "PassResult", "Pipeline", "PipelineError", "PipelineReport", "PrecisionChange",
    "ReplaceViewCopyWithView", "ShimkitPass", "VIEW_OF_COPY", "count_ops", "describe_node",
    "lower_float64_as_float32",
]
