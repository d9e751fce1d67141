"""Grouped and depthwise 1-D convolution on CUDA as a sum of shifted products.

ExecuTorch's ``CudaBackend`` has Inductor tune convolutions with Triton templates alone
(``max_autotune_conv_backends="TRITON"``), and Inductor has no Triton template for a grouped ``conv1d``:
a conformer's depthwise ``Conv1d(dim, dim, k, groups=dim)`` fails with ``NoValidChoicesError`` (docs/cuda.md).
Written out, the convolution is, for each of the ``k`` taps, a strided slice of the padded input times that
tap's weights, summed: pointwise products (depthwise) or one batched matrix product per tap (grouped),
all of which Inductor generates Triton code for. The tap count comes from the weight's static shape;
the sequence length may be dynamic (the slices' ends follow it).

Semantics kept from ATen: float16 and bfloat16 accumulate in float32 and round once; NaN and inf in the input
propagate through the outputs that read them; an empty batch gives an empty result. Padding is multiplied as
zeros, so a non-finite weight tap over the padding gives NaN there (ATen's CPU kernels disagree among
themselves on that corner). Ungrouped, 2-D and transposed convolutions are declined (Inductor's templates
cover them).
"""

from __future__ import annotations

import math

import torch

from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

CONVOLUTION = "aten::convolution.default"
# ExecuTorch's AOTI partitioner keeps every op of the program as it is, so a model's Conv1d reaches the
# backend's passes as conv1d (Inductor turns it into a convolution later, past the passes).
CONV1D = "aten::conv1d.default"


def grouped_conv1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                   padding: list[int], dilation: list[int], transposed: bool, output_padding: list[int],
                   groups: int) -> torch.Tensor:
    if transposed or weight.dim() != 3 or groups == 1:
        raise DecompositionDeclined("only grouped, non-transposed 1-D convolutions are written out; "
                                    "Inductor's templates handle the others")
    if any(isinstance(size, torch.SymInt) for size in (input.shape[1], *weight.shape)):
        # Splitting a dynamic channel count into groups would guard on its value: only the sequence and
        # the batch may be dynamic (a model's channels never are).
        raise DecompositionDeclined("the channel counts and the tap count must be static")
    if weight.shape[2] == 0:
        raise DecompositionDeclined("a convolution without taps is ATen's to reject")
    (step,), (pad,), (spacing,) = stride, padding, dilation
    batch, _, length = input.shape
    out_channels, per_group, taps = weight.shape
    result_dtype = input.dtype
    accumulate = torch.float32 if result_dtype in (torch.float16, torch.bfloat16) else result_dtype
    padded = torch.constant_pad_nd(input.to(accumulate), [pad, pad])
    out_length = (length + 2 * pad - spacing * (taps - 1) - 1) // step + 1
    grouped = padded.reshape(batch, groups, per_group, length + 2 * pad)
    kernels = weight.to(accumulate).reshape(groups, out_channels // groups, per_group, taps)

    def tap_term(tap: int) -> torch.Tensor:
        start = tap * spacing
        window = grouped[..., start:start + step * (out_length - 1) + 1:step]  # (batch, groups, per_group, L)
        if per_group == 1:  # depthwise: each output channel scales one input channel
            return window * kernels[None, :, :, 0, tap, None]
        return torch.matmul(kernels[None, :, :, :, tap], window)  # (batch, groups, out/groups, L)

    total = tap_term(0)
    for tap in range(1, taps):
        total = total + tap_term(tap)
    result = total.reshape(batch, out_channels, out_length)
    if bias is not None:
        result = result + bias.to(accumulate)[None, :, None]
    return result.to(result_dtype)


def _single(value: int | list[int]) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def grouped_conv1d_call(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                        stride: int | list[int] = 1, padding: int | list[int] = 0, dilation: int | list[int] = 1,
                        groups: int = 1) -> torch.Tensor:
    """``conv1d`` (an unbatched ``(channels, length)`` input too) as :func:`grouped_conv1d`."""
    batched = input if input.dim() == 3 else input.unsqueeze(0)
    result = grouped_conv1d(batched, weight, bias, _single(stride), _single(padding), _single(dilation), False,
                            [0], groups)
    return result if input.dim() == 3 else result.squeeze(0)


def conv1d_inputs():
    """``conv1d`` calls: :func:`grouped_conv1d_inputs`' cases, a third of them unbatched."""
    from hypothesis import strategies as st

    def as_conv1d(call: OpCall, unbatched: bool) -> OpCall:
        x, weight, bias, stride, padding, dilation, _, _, groups = call.args
        if unbatched and x.shape[0] > 0:
            x = x[0]
        return OpCall((x, weight, bias, stride, padding, dilation, groups), {})

    return st.builds(as_conv1d, grouped_conv1d_inputs(), st.sampled_from([False, False, True]))


def grouped_conv1d_inputs():
    """``convolution`` calls of grouped and depthwise ``conv1d``: 2 to 4 groups, 1 to 3 input channels per
    group, 1 to 4 taps, stride, padding and dilation up to 3, with and without bias, float32 values with
    NaN (below), float16 and bfloat16 too, lengths down to one output position and batches down to 0.

    No infinities, and NaN in the input and bias only: whether a non-finite weight meets zeros ATen does
    not read depends on which CPU kernel ATen picks (bfloat16, 4 groups of 3 channels, one tap: an input
    of ``[0, 0, 1]`` against weights ``[0, 0, inf]`` gives NaN, not ``inf``; float32 depthwise: a NaN
    weight tap over the padding gives 0, while the padded-zeros formula gives NaN), so there is no one
    reference to compare with."""
    from hypothesis import strategies as st

    finite = st.floats(-4, 4, width=32) | st.just(0.0)
    values = finite | st.just(float("nan"))

    @st.composite
    def call(draw):
        groups, per_group, taps = draw(st.integers(2, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
        out_per_group = draw(st.integers(1, 2))
        step, pad, spacing = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(1, 3))
        reach = spacing * (taps - 1) + 1
        length = draw(st.integers(max(1, reach - 2 * pad), reach - 2 * pad + 12))
        batch = draw(st.integers(0, 2))
        dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float16, torch.bfloat16]))

        def tensor(elements, *shape):
            flat = draw(st.lists(elements, min_size=math.prod(shape), max_size=math.prod(shape)))
            return torch.tensor(flat, dtype=torch.float32).reshape(shape).to(dtype)

        x = tensor(values, batch, groups * per_group, length)
        weight = tensor(finite, groups * out_per_group, per_group, taps)
        bias = tensor(values, groups * out_per_group) if draw(st.booleans()) else None
        return OpCall((x, weight, bias, [step], [pad], [spacing], False, [0], groups), {})

    return call()


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="grouped-conv1d",
        ops=(CONVOLUTION, CONV1D),
        decompositions={CONVOLUTION: grouped_conv1d, CONV1D: grouped_conv1d_call},
        references={CONVOLUTION: torch.ops.aten.convolution.default, CONV1D: torch.ops.aten.conv1d.default},
        input_strategies={CONVOLUTION: grouped_conv1d_inputs, CONV1D: conv1d_inputs},
        # Metal has a convolution kernel for every group count (plugins/convolution.py); CUDA's Triton
        # templates have none for grouped conv1d.
        decomposition_devices=("cuda",),
        doc="Grouped and depthwise conv1d on CUDA as a sum of shifted products (Inductor has no Triton "
            "template for them).",
    )
