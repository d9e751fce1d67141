"""PyTorch's own decompositions (``torch._decomp.decomposition_table``) for ops that stop in ``to_edge``.

These ops are not core ATen, so a model calling them stops in ``to_edge`` (``SpecViolationError: Operator
torch._ops.aten.X is not in Core ATen opset``) on every backend. PyTorch ships a decomposition for each in
``torch._decomp`` (``torch/_decomp/decompositions.py`` or a ``torch._refs`` reference); this plugin lists
them as ``pre_edge`` decompositions, unchanged. References written on ``torch.ops.prims`` are run with each
prim replaced by that prim's own ATen implementation (``prim.impl_aten``, also PyTorch's), so the graph
holds ATen ops. Every op kept was checked (tests/test_plugin_torch_decompositions.py): its decomposition,
traced, holds only core ATen ops, ops ``to_edge`` decomposes itself (``core_aten_decompositions``:
``new_full``, ``norm.Scalar``, ``true_divide``) or ops the Metal code generator compiles (``signbit``,
``plugins/metal_generated.py``); it matches ATen on every OpInfo sample in float32 and float16; a one-op
model of it audits clean on Metal with ``--check-numerics``.

Kept (4): ``copysign`` (Tensor, Scalar), ``ldexp.Tensor``, ``dist``. Numerics are
torch's decompositions', which match ATen's to the default ``assert_close`` tolerances in both dtypes.

Dropped:

* ``angle``, ``addbmm``, ``empty_permuted``, ``polygamma``, ``median``/``nanmedian``, ``mode``,
  ``index_reduce``, ``put``, ``triangular_solve``/``linalg_solve_triangular``, ``cholesky``,
  ``cholesky_inverse``, ``cholesky_solve``, ``linalg_cholesky_ex``, ``grid_sampler_3d``, ``nonzero_static``,
  ``special_*_polynomial_*``: no entry in ``torch._decomp.decomposition_table`` (meta kernels only).
* ``frexp``, ``nextafter``, ``as_strided_scatter``, ``digamma``, ``lgamma``, ``special_erfcx``,
  ``special_ndtri``, ``special_zeta``: torch's reference is the op's own prim, whose ATen implementation is
  the op again (tracing recurses; nothing core ATen comes out).
* ``diagonal_scatter``: torch's reference writes with ``copy_`` into a view; ``run_decompositions``
  refuses the non-functional graph.
* ``adaptive_max_pool2d``/``adaptive_max_pool3d``: torch's decomposition returns ``NotImplemented`` on 16
  of 24 (2d) and 12 of 20 (3d) OpInfo float32 samples (output sizes that don't divide the input), which
  would still stop in ``to_edge``.
* ``new_empty_strided``: uninitialised memory; nothing to compare with ATen or audit numerically.
* ``native_batch_norm``, ``_native_batch_norm_legit_functional``, ``_batch_norm_with_update_functional``
  (batch norm in training mode): torch has decompositions (matching ATen, float16 within half's rounding
  of float64), but ``torch.export`` leaves ``aten.batch_norm`` / ``_batch_norm_with_update`` in the graph and
  ``to_edge`` makes the functional op only after the pre-edge step, so it still stops there; it needs a
  pre-edge decomposition of ``aten::batch_norm`` itself (a composite: through its own kernel it recurses).
* ``var_mean.correction``: torch's decomposition takes the mean as a sum over the count, ATen's kernel by
  Welford's updates, which turn an infinite element into a NaN mean (``var_mean([inf, 0])``: ATen's mean NaN,
  the decomposition's inf); found by the dynamic-size property, so not kept.
* random ops and ops whose output size depends on data: not checked here (``plugins/random``,
  ``plugins/nonzero``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shimkit.registry import OpPlugin, canonical_op_name, hookimpl, resolve_op

KEPT = (
    "aten::copysign.Tensor",
    "aten::copysign.Scalar",
    "aten::ldexp.Tensor",
    "aten::dist.default",
)


class _PrimsAsAten(TorchDispatchMode):
    """Each ``torch.ops.prims`` op called inside runs its ATen implementation (``impl_aten``), so a
    ``torch._refs`` reference traces to ATen ops instead of prims, which the edge verifier rejects."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        impl_aten = getattr(func, "impl_aten", None) if func.namespace == "prims" else None
        if impl_aten is not None:
            return impl_aten(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def torch_decomposition(op: str) -> Callable[..., Any]:
    """``op``'s decomposition from ``torch._decomp.decomposition_table``, its prims run as ATen."""
    from torch._decomp import decomposition_table

    decomposition = decomposition_table[resolve_op(op)]

    def decompose(*args: Any, **kwargs: Any) -> Any:
        with _PrimsAsAten():
            return decomposition(*args, **kwargs)

    decompose.__qualname__ = f"torch_decomposition({canonical_op_name(resolve_op(op))})"
    return decompose


def _reference(op: str) -> Callable[..., Any]:
    overload = resolve_op(op)

    def reference(*args: Any, **kwargs: Any) -> Any:
        return overload(*args, **kwargs)

    return reference


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="torch-decompositions",
        ops=KEPT,
        decompositions={op: torch_decomposition(op) for op in KEPT},
        # Not core ATen: without these, the ops stop in to_edge before any backend sees them.
        pre_edge=KEPT,
        references={op: _reference(op) for op in KEPT},
        doc="PyTorch's own torch._decomp decompositions (prims run as ATen) for copysign, ldexp and dist.",
    )
