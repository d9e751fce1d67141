"""Antialiased bilinear and bicubic resizing (``F.interpolate(..., antialias=True)``) as two matrix
products, for devices with no kernel for ``aten::_upsample_{bilinear,bicubic}2d_aa``.

Inductor has no lowering for these ops and no c-shim exists, so stock lowering routes them to the proxy
executor, which ExecuTorch's libtorch-free runtime lacks. The resize is separable: ATen computes, for each
output row (column), weights over a window of input rows (columns), then applies them along height and
width. Written as dense weight matrices ``Wh [out_h, in_h]`` and ``Ww [out_w, in_w]`` the result is
``Wh @ x @ Ww^T``, which Inductor turns into matrix-multiply kernels and elementwise code.

The weights are ATen's (``_compute_indices_min_size_weights_aa`` in ``aten/src/ATen/native/cpu/
UpSampleKernel.cpp``, PIL's algorithm): ``scale = in/out`` (or ``1/scale_factor`` when given, and
``(in-1)/(out-1)`` with ``align_corners``), ``center = scale * (i + 0.5)``, ``support = scale * r`` when
downscaling and ``r`` otherwise (``r`` = 1 for the triangle filter, 2 for Keys' cubic with ``a = -0.5``), the
window ``[trunc(center - support + 0.5), trunc(center + support + 0.5))`` clipped to the input, filter values
at ``(x - center + 0.5) / max(scale, 1)``, normalised to sum to one; an axis whose size does not change is
left as it is (even with a scale factor), as ATen does. They are built from ``arange`` of the
sizes, so a dynamic size gets its own weights at every size. half and bfloat16 are resized in float32 and
rounded once. Declined (the op stays, the audit says why): uint8 images (ATen's separate fixed-point path),
and a scale factor applied to a dynamic height or width (the output size is then symbolic).
"""

from __future__ import annotations

import torch

from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

BILINEAR_AA = "aten::_upsample_bilinear2d_aa.default"
BICUBIC_AA = "aten::_upsample_bicubic2d_aa.default"
# The overloads F.interpolate calls; the AOTI partitioner keeps them undecomposed, so they reach the backend.
BILINEAR_AA_VEC = "aten::_upsample_bilinear2d_aa.vec"
BICUBIC_AA_VEC = "aten::_upsample_bicubic2d_aa.vec"


def _triangle(x: torch.Tensor) -> torch.Tensor:
    x = x.abs()
    return torch.where(x < 1, 1 - x, torch.zeros_like(x))


def _keys_cubic(x: torch.Tensor) -> torch.Tensor:
    a = -0.5
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


FILTERS = {BILINEAR_AA: (_triangle, 1.0), BICUBIC_AA: (_keys_cubic, 2.0)}


def _scale(input_size, output_size, align_corners: bool, scale_factor: float | None,
           device: torch.device) -> torch.Tensor:
    """ATen's ``area_pixel_compute_scale``, as a 0-d float32 tensor (a dynamic size is never compared)."""
    size = torch.full((), input_size, dtype=torch.float32, device=device)
    if align_corners:
        steps = torch.full((), output_size, dtype=torch.float32, device=device) - 1
        return torch.where(steps > 0, (size - 1) / steps.clamp(min=1), torch.zeros_like(size))
    if scale_factor is not None and scale_factor > 0:
        return torch.full((), 1.0 / scale_factor, dtype=torch.float32, device=device)
    return size / output_size


def resize_weights(input_size, output_size, align_corners: bool, scale_factor: float | None, filter_fn,
                   radius: float, device: torch.device) -> torch.Tensor:
    """The ``[output_size, input_size]`` float32 matrix of ATen's antialiasing weights along one axis."""
    scale = _scale(input_size, output_size, align_corners, scale_factor, device)
    downscaling = scale >= 1.0
    support = torch.where(downscaling, radius * scale, torch.full_like(scale, radius))
    inverse = torch.where(downscaling, 1.0 / scale, torch.ones_like(scale))
    centers = (torch.arange(output_size, device=device, dtype=torch.float32) + 0.5) * scale
    first = (centers - support + 0.5).trunc().clamp(min=0)
    end = torch.minimum((centers + support + 0.5).trunc(), torch.full((), input_size, dtype=torch.float32,
                                                                       device=device))
    positions = torch.arange(input_size, device=device, dtype=torch.float32)
    inside = (positions[None, :] >= first[:, None]) & (positions[None, :] < end[:, None])
    values = filter_fn((positions[None, :] - centers[:, None] + 0.5) * inverse)
    values = torch.where(inside, values, torch.zeros_like(values))
    total = values.sum(dim=1, keepdim=True)
    weights = torch.where(total != 0, values / torch.where(total != 0, total, torch.ones_like(total)), values)
    # ATen leaves an axis whose size does not change untouched, whatever scale factor it is given.
    unchanged = torch.full((), input_size, dtype=torch.int64, device=device) == output_size
    identity = positions[None, :] == torch.arange(output_size, device=device, dtype=torch.float32)[:, None]
    return torch.where(unchanged, identity.to(weights.dtype), weights)


def _apply(values: torch.Tensor, height: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
    """``height @ values @ width^T`` over the last two dims, as an ``mm`` then a ``bmm`` on row-major
    views (``matmul``'s broadcasting and reshapes of permuted tensors would branch on the sizes)."""
    n, c, rows, columns = values.shape
    out_rows, out_columns = height.shape[0], width.shape[0]
    by_column = torch.mm(values.contiguous().view(n * c * rows, columns), width.t())
    by_row = torch.bmm(height.expand(n * c, out_rows, rows), by_column.view(n * c, rows, out_columns))
    return by_row.view(n, c, out_rows, out_columns)


def _resize(op: str):
    filter_fn, radius = FILTERS[op]

    def decomposition(input, output_size, align_corners, scales_h=None, scales_w=None):
        if input.dtype == torch.uint8 or not input.is_floating_point():
            raise DecompositionDeclined(f"{op} on {input.dtype} uses ATen's fixed-point path; only floating "
                                        f"inputs are decomposed")
        result_dtype = input.dtype
        values = input.float() if result_dtype in ACCUMULATE_IN_FLOAT32 else input
        out_h, out_w = output_size
        height = resize_weights(values.shape[-2], out_h, align_corners, scales_h, filter_fn, radius, values.device)
        width = resize_weights(values.shape[-1], out_w, align_corners, scales_w, filter_fn, radius, values.device)
        return _apply(values, height.to(values.dtype), width.to(values.dtype)).to(result_dtype)

    decomposition.__name__ = decomposition.__qualname__ = f"{op.split('::')[1].split('.')[0]}_decomposition"
    return decomposition


def _sizes_and_scales(input, output_size, scale_factors):
    """What ATen's ``.vec`` overload passes to the sized one: the output size (``trunc(size * factor)``
    when only factors are given) and the factors as scales."""
    if output_size is not None:
        return list(output_size), (None, None)
    if scale_factors is None or len(scale_factors) != 2:
        raise ValueError(f"_upsample_*2d_aa.vec needs output_size or two scale_factors, got {scale_factors!r}")
    if not all(isinstance(size, int) for size in input.shape[-2:]):
        raise DecompositionDeclined(
            "antialiased resize by a scale factor of a dynamic size: the output size trunc(size * factor) "
            "is symbolic and the traced weights would branch on it; export with static height and width, or "
            "pass an output size")
    sizes = [int(size * factor) for size, factor in zip(input.shape[-2:], scale_factors)]
    return sizes, (scale_factors[0], scale_factors[1])


def _vec(sized):
    def vec(input, output_size, align_corners, scale_factors):
        sizes, (scales_h, scales_w) = _sizes_and_scales(input, output_size, scale_factors)
        return sized(input, sizes, align_corners, scales_h, scales_w)

    vec.__name__ = vec.__qualname__ = f"{sized.__name__}_vec"
    return vec


def _reference(aten_op):
    """ATen's op, computed in float32 for half precision. ATen's CPU kernel (torch 2.13) is wrong when the
    output is one pixel wide and the height changes: it repeats the first output row (a ``[0, 1, 2]``
    column resized to 2 rows gives ``[0.375, 0.375]``, not ``[0.375, 1.625]``); there the reference is ATen's
    own result on the transposed image, which it gets right."""
    def reference(input, output_size, align_corners, scales_h=None, scales_w=None):
        result_dtype = input.dtype
        values = input.float() if result_dtype in ACCUMULATE_IN_FLOAT32 else input
        if output_size[1] == 1 and values.shape[-2] != output_size[0]:
            transposed = aten_op(values.transpose(-1, -2).contiguous(), [output_size[1], output_size[0]],
                                 align_corners, scales_w, scales_h)
            return transposed.transpose(-1, -2).contiguous().to(result_dtype)
        return aten_op(values, output_size, align_corners, scales_h, scales_w).to(result_dtype)

    return reference


def resize_inputs():
    """Calls as ``F.interpolate`` makes them on ``[N, C, H, W]`` images from 1 to 13 pixels a side, up- and
    downscaling to explicit output sizes (from 1), with and without ``align_corners``.

    Scale factors are left to the tests' fixed cases and PyTorch's OpInfo samples: the dynamic-size check
    varies the input size, and at other sizes a fixed factor no longer matches the output size (the sized
    overload) or makes torch's own ``.vec`` meta guard on ``trunc(size * factor)`` (the decomposition then
    declines), neither of which says anything about the weights."""
    import math

    from hypothesis import strategies as st

    def image(shape):
        count = math.prod(shape)
        return st.lists(st.floats(-4, 4, width=32), min_size=count, max_size=count).map(
            lambda v: torch.tensor(v, dtype=torch.float32).reshape(shape))

    def call(shape):
        return st.builds(lambda x, corners, out_h, out_w: OpCall((x, [out_h, out_w], corners, None, None)),
                         image(shape), st.booleans(), st.integers(1, 13), st.integers(1, 13))

    return st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 13), st.integers(1, 13)).flatmap(call)


def resize_vec_inputs():
    """The same calls in the ``.vec`` form: an output size and no scale factors."""
    return resize_inputs().map(lambda call: OpCall((call.args[0], list(call.args[1]), call.args[2], None)))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="upsample_aa",
        ops=(BILINEAR_AA, BICUBIC_AA, BILINEAR_AA_VEC, BICUBIC_AA_VEC),
        decompositions={BILINEAR_AA: _resize(BILINEAR_AA), BICUBIC_AA: _resize(BICUBIC_AA),
                        BILINEAR_AA_VEC: _vec(_resize(BILINEAR_AA)), BICUBIC_AA_VEC: _vec(_resize(BICUBIC_AA))},
        references={BILINEAR_AA: _reference(torch.ops.aten._upsample_bilinear2d_aa.default),
                    BICUBIC_AA: _reference(torch.ops.aten._upsample_bicubic2d_aa.default),
                    BILINEAR_AA_VEC: _vec(_reference(torch.ops.aten._upsample_bilinear2d_aa.default)),
                    BICUBIC_AA_VEC: _vec(_reference(torch.ops.aten._upsample_bicubic2d_aa.default))},
        input_strategies={BILINEAR_AA: resize_inputs, BICUBIC_AA: resize_inputs,
                          BILINEAR_AA_VEC: resize_vec_inputs, BICUBIC_AA_VEC: resize_vec_inputs},
        doc="Antialiased bilinear/bicubic interpolation as Wh @ x @ Ww^T with ATen's (PIL's) weights.",
    )
