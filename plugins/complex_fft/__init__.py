"""Complex values as real pairs: the ``complex_pairs`` graph pass (``passes/complex_pairs.py``).

Metal and Inductor's Metal code have no complex dtype. CUDA has one, but the pass runs there too: it runs
before ``to_edge`` (``BackendConfig.prepare_for_edge``), whose verifier rejects complex programs on every
device (``polar`` and ``complex`` are not core ATen; ``view_as_complex`` of a parameter fails its autograd
check; on the H100 the three complex zoo models failed there, stock and with shimkit, until it did). A
complex graph output stays complex through one ``view_as_complex`` of its real pair, which the Metal audit
names as a missing kernel.
"""

from __future__ import annotations

from shimkit.passes.complex_pairs import ComplexPairs
from shimkit.registry import PassSpec, hookimpl


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="complex_pairs",
        factory=lambda capabilities: ComplexPairs(complex_outputs="view_as_complex"),
        devices=("mps", "cuda"),
        stage="pre_edge",
        doc="Complex values carried as view_as_real-packed real tensors; FFTs as exact-angle DFT matmuls.",
    )
