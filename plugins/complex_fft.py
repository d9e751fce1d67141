"""Complex values as real pairs on mps: the ``complex_pairs`` graph pass (``passes/complex_pairs.py``).

Metal and Inductor's Metal code have no complex dtype; CUDA has one, so the pass runs on mps only. It runs
before ``to_edge`` (``BackendConfig.prepare_for_edge``), whose verifier rejects complex programs (``polar``
and ``complex`` are not core ATen; ``view_as_complex`` of a parameter fails its autograd check). A complex graph output
stays complex through one ``view_as_complex`` of its real pair, which the audit names as a missing kernel.
"""

from __future__ import annotations

from shimkit.passes.complex_pairs import ComplexPairs
from shimkit.registry import PassSpec, hookimpl


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="complex_pairs",
        factory=lambda capabilities: ComplexPairs(complex_outputs="view_as_complex"),
        devices=("mps",),
        stage="pre_edge",
        doc="Complex values carried as view_as_real-packed real tensors; FFTs as exact-angle DFT matmuls.",
    )
