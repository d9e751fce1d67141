"""``aten::addmm``: ``beta * self + alpha * (mat1 @ mat2)``.

Inductor emits ``aoti_torch_mps_addmm_out`` both for ``addmm`` in the graph and for its own
``mm + bias`` re-fusion (docs/metal-aoti.md, "The mm + bias → addmm fusion"). Where a device has no addmm shim the decomposition below is
applied instead, on Metal only: ExecuTorch's ``CudaBackend`` tunes GEMMs with Triton templates alone
(``max_autotune_gemm_backends="TRITON"``), so Inductor compiles ``addmm``, bias included, into Triton code
and never calls an addmm kernel there. Its rules, shared with ``baddbmm`` and ``addmv``, are ATen's (checked
on torch's OpInfo samples in every dtype ATen supports):

* half and bfloat16 are computed in float32 (the product accumulates in float32, then
  ``beta * self + alpha * product``) and rounded to the result dtype once, as ATen's CPU kernel does;
  rounding the product first would be off by up to 2**-8 of its magnitude before the add;
* ``beta == 0`` ignores ``self``: NaN and inf there never propagate;
* ``alpha == 0`` ignores the product only where ATen's kernel skips it (BLAS does): ``addmm`` in float32,
  float64 and the complex dtypes, ``addmv`` in float32 and float64. Elsewhere (half precision, ``addmv`` on
  complex, ``baddbmm`` always) ATen multiplies the product by zero, so NaN and inf in the matrices show as
  NaN;
* integer tensors take ``beta`` and ``alpha`` converted to their dtype first, as ATen does: ``beta=0.2,
  alpha=0.6`` on int32 is ``0 * self + 0 * product``, all zeros, not a product scaled in floating point
  and truncated afterwards.

On mps the plugin ships its own ``aoti_torch_mps_addmm_out`` (the ``kernel/`` folder beside this file): a
portable plan (validation, layouts, graph-cache key) plus an MPSGraph implementation, compiled by
ExecuTorch's Metal runtime build from the kernel's ``runtime_sources``. Those Objective-C++ sources have not
been run on a Mac by shimkit's CI; on Linux they compile unchanged against shimkit.objc's Metal and MPSGraph on the
CPU, which whole programs (``shimkit audit --execute``) run them through, and tests/test_objc_addmm.py runs
``addmm_metal.mm`` under AddressSanitizer. The kernel's host module (its
``host_sources``) runs the same plan with a reference kernel on any machine, through pybind11 and as
the c-shim ``shimkit_ref_addmm_out`` over real AtenTensorHandles (see docs/kernels.md).
"""

from __future__ import annotations

from pathlib import Path

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32
from shimkit.registry import Kernel, OpPlugin, Shim, hookimpl

ADDMM = "aten::addmm.default"
KERNEL = Kernel(
    name="addmm",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("addmm_plan.cpp", "addmm_metal.mm", "addmm_shim_mps.mm"),
    host_sources=("addmm_plan.cpp", "addmm_reference.cpp", "addmm_bindings.cpp", "addmm_shim_reference.cpp"),
    entry_points=("addmm_plan", "addmm_reference", "shimkit_ref_addmm_out", "shimkit_ref_last_error"),
    links_libtorch=True,
)


# The dtypes in which ATen's kernel skips the product when ``alpha == 0`` (see the rules above).
BLAS_DTYPES = frozenset({torch.float32, torch.float64})
ADDMM_SKIPS_ZERO_ALPHA = BLAS_DTYPES | {torch.complex64, torch.complex128}


def scaled_product_sum(self, a, b, multiply, product_shape, *, beta, alpha, zero_alpha_skips=ADDMM_SKIPS_ZERO_ALPHA):
    """``beta * self + alpha * multiply(a, b)`` by the rules above; ``product_shape(a, b)`` is the
    product's shape, for the zeros that stand in for it where a zero ``alpha`` skips it: in the dtypes of
    ``zero_alpha_skips`` (which differ per op) and the integer ones (which have no NaN to show)."""
    result_dtype = a.dtype
    beta, alpha = _in_dtype(beta, result_dtype), _in_dtype(alpha, result_dtype)
    integral = not (result_dtype.is_floating_point or result_dtype.is_complex)
    if result_dtype in ACCUMULATE_IN_FLOAT32:
        self, a, b = self.float(), a.float(), b.float()
    if alpha == 0 and (integral or result_dtype in zero_alpha_skips):
        # The product is ignored entirely, so NaN/inf in a or b must not leak through the matmul.
        product = torch.zeros(product_shape(a, b), dtype=a.dtype, device=a.device)
    else:
        product = multiply(a, b)
        if alpha != 1:
            product = product * alpha
    if beta == 0:
        if _static(self.shape, product.shape):  # traced, export already checked the op's shapes
            torch.broadcast_shapes(self.shape, product.shape)  # ATen rejects a self that cannot broadcast
        result = product
    else:
        result = product + (self if beta == 1 else self * beta)
    return result.to(result_dtype)


def _in_dtype(scalar, dtype: torch.dtype):
    """``scalar`` as ATen converts a Scalar for a ``dtype`` kernel: truncated toward zero for integers."""
    if dtype == torch.bool:
        return bool(scalar)
    if not (dtype.is_floating_point or dtype.is_complex):
        return int(scalar)
    return scalar


def aten_reference(aten_op):
    """ATen's ``aten_op`` (``torch.addmm``, ``torch.baddbmm``), half precision computed in float32 and
    rounded once where the product counts (with ``alpha == 0`` ATen's own result in the dtype: the product
    adds nothing or NaN)."""
    def reference(self, a, b, *, beta=1, alpha=1):
        if a.dtype in ACCUMULATE_IN_FLOAT32 and alpha != 0:
            return aten_op(self.float(), a.float(), b.float(), beta=beta, alpha=alpha).to(a.dtype)
        return aten_op(self, a, b, beta=beta, alpha=alpha)

    reference.__name__ = reference.__qualname__ = f"{aten_op.__name__}_reference"
    return reference


def addmm_decomposition(self, mat1, mat2, *, beta=1, alpha=1):
    """``addmm`` written with ``mm``, ``mul`` and ``add`` only."""
    return scaled_product_sum(self, mat1, mat2, torch.mm, lambda a, b: (a.shape[0], b.shape[1]),
                              beta=beta, alpha=alpha)


addmm_reference = aten_reference(torch.addmm)


def _static(*shapes: torch.Size) -> bool:
    return not any(isinstance(size, torch.SymInt) for shape in shapes for size in shape)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="addmm",
        ops=(ADDMM,),
        shims=(Shim(op=ADDMM, device="mps", symbol="aoti_torch_mps_addmm_out", kernel=KERNEL),),
        decompositions={ADDMM: addmm_decomposition},
        decomposition_devices=("mps",),
        references={ADDMM: addmm_reference},
        doc="addmm: shimkit's Metal kernel on mps (mm plus a scaled add where it is blocked); Triton code on cuda.",
    )
