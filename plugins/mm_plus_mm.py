"""Sums of two matrix products on mps, for the extern kernel ``aoti_torch__mm_plus_mm_out`` that Inductor's
``mm_plus_mm`` pattern calls under ``max_autotune`` (ExecuTorch's Metal backend sets it) and the Metal
runtime lacks: the ``join_matmul_sums`` pass writes such a sum as one ``mm`` first
(``passes/matmul_sums.py``). Found with a bias-free recurrent cell, ``tanh(W x + U h)``, which did not
lower on Metal, stock or with shimkit. A plugin that ships the kernel itself (a mps shim for
``inductor::_mm_plus_mm``) turns the pass off.
"""

from __future__ import annotations

from shimkit.passes.matmul_sums import JoinMatmulSums
from shimkit.registry import PassSpec, hookimpl


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="join_matmul_sums",
        factory=JoinMatmulSums.from_capabilities,
        devices=("mps",),
        before=("view_copy_to_view",),
        doc="mm(a, b) + mm(c, d) -> mm(cat([a, c], 1), cat([b, d], 0)), which Inductor's mm_plus_mm pattern would "
            "otherwise make a call of aoti_torch__mm_plus_mm_out (not in the Metal runtime).",
    )
