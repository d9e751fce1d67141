"""``F.linear_cross_entropy``'s chunked custom ops, decomposed into the linear layer and the cross-entropy
they compute.

torch 2.13 sends ``F.linear_cross_entropy(..., options=...)`` (reduction mean, sum or none, no label
smoothing, int64 targets) through ``torch_nn::_linear_cross_entropy_batch_chunked`` and
``torch_nn::_linear_cross_entropy_batch_chunked_no_reduction``. For training they fuse the loss with its
gradients, chunk by chunk, so that the ``(N, C)`` logits never exist whole. An exported program calls
them as opaque custom ops, and no AOTInductor backend has a kernel for them: stock reports
``torch_nn::_linear_cross_entropy_batch_chunked`` missing.

At inference the gradient outputs are empty placeholders (``compute_*_grad`` false), so each op is
``cross_entropy(input @ linear_weight.T + linear_bias, target, weight, reduction, ignore_index)``.
Inductor generates that; the product goes through the device's ``mm``. Like the chunked loop, the
decomposition computes logits, log-softmax and the reduction in ``acc_dtype`` (float32 for the half
types) and rounds the loss to ``input.dtype`` once. The chunked loop keeps float16 logits in float16
under its memory-saving policies, so in float16 the two agree to float16's tolerance, not bit for bit.

The decomposition declines where the node asks for gradients (a training graph, whose precomputed
gradients it does not build) or for label smoothing (the chunked path never takes it).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
try:
    import torch.nn.modules.linear_cross_entropy  # noqa: F401  (registers the torch_nn:: custom ops)
except ModuleNotFoundError:
    # A torch release before the chunked ops (2.11): its programs never call them, and the registry leaves a
    # built-in's ops that this torch does not define out quietly, as "not available here".
    pass
from torch.fx.experimental.symbolic_shapes import statically_known_true

from shimkit.plugins.shared import float32_tensors
from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl

CHUNKED = "torch_nn::_linear_cross_entropy_batch_chunked.default"
CHUNKED_NO_REDUCTION = "torch_nn::_linear_cross_entropy_batch_chunked_no_reduction.default"


def _check_aligned_sizes(input, linear_weight, target, linear_bias, weight) -> None:
    """Decline where sizes that must agree are not known to for every size the program allows: the
    product and the loss would guard on them (the custom op's fake kernel checks none of them)."""
    pairs = [("input features", input.shape[1], "linear_weight features", linear_weight.shape[1]),
             ("input rows", input.shape[0], "target rows", target.shape[0])]
    pairs += [(f"{name} size", tensor.shape[0], "classes", linear_weight.shape[0])
              for name, tensor in (("linear_bias", linear_bias), ("weight", weight)) if tensor is not None]
    for name, size, other_name, other in pairs:
        if not statically_known_true(size == other):
            raise DecompositionDeclined(f"{name} ({size}) and {other_name} ({other}) are not equal at every size "
                                        f"the program allows: export them with one torch.export.Dim")


def _loss(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, acc_dtype):
    _check_aligned_sizes(input, linear_weight, target, linear_bias, weight)
    logits = torch.mm(input.to(acc_dtype), linear_weight.to(acc_dtype).t())
    if linear_bias is not None:
        logits = logits + linear_bias.to(acc_dtype)
    class_weight = None if weight is None else weight.to(acc_dtype)
    loss = F.cross_entropy(logits, target, weight=class_weight, reduction=reduction, ignore_index=ignore_index)
    return loss.to(input.dtype)


def chunked_decomposition(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                          label_smoothing, batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph,
                          compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad):
    if compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad:
        raise DecompositionDeclined("the node precomputes gradients (a training graph); the decomposition "
                                    "computes the loss only")
    if label_smoothing != 0.0:
        raise DecompositionDeclined(f"label_smoothing={label_smoothing}: the chunked op is only called without it")
    loss = _loss(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, acc_dtype)
    # The gradient outputs are what the op returns when none is asked for: empty, in the input's dtype.
    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=input.dtype, device=input.device)
    return loss, empty(0, 0), empty(0, 0), empty(0)


def chunked_no_reduction_decomposition(input, linear_weight, target, linear_bias, weight, ignore_index,
                                       batch_chunk_size, acc_policy, acc_dtype):
    return _loss(input, linear_weight, target, linear_bias, weight, "none", ignore_index, acc_dtype)


def _calls(reductions: tuple[str, ...]) -> Any:
    """Strategy of ``(input, linear_weight, target, linear_bias, weight, ...)`` for one of the two ops:
    batches from 0 (a mean over nothing is NaN, as in ATen), targets that hit ``ignore_index``, with and
    without bias and class weights, large logits (the log-softmax must not overflow)."""
    from hypothesis import strategies as st

    elements = st.floats(-30, 30, width=32)

    def optional(shape):
        return st.none() | float32_tensors(shape, st.floats(0.25, 4, width=32))

    def call(sizes):
        batch, features, classes, ignore_index = sizes
        targets = st.lists(st.integers(0, classes - 1) | st.just(ignore_index), min_size=batch,
                           max_size=batch).map(lambda t: torch.tensor(t, dtype=torch.int64).reshape(batch))
        common = (float32_tensors((batch, features), elements), float32_tensors((classes, features), elements),
                  targets, st.none() | float32_tensors((classes,), elements), optional((classes,)))
        if reductions == ("none",):
            return st.builds(lambda i, w, t, b, cw: OpCall((i, w, t, b, cw, ignore_index, 1, "compact",
                                                            torch.float32)), *common)
        return st.builds(lambda i, w, t, b, cw, reduction: OpCall(
            (i, w, t, b, cw, reduction, ignore_index, 0.0, 2, "compact", torch.float32, True, False, False,
             False)), *common, st.sampled_from(reductions))

    return st.tuples(st.integers(0, 5), st.integers(1, 4), st.integers(1, 5),
                     st.sampled_from([-100, 0])).flatmap(call)


def _chunked_reference(*args: Any) -> Any:
    return torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default(*args)


def _chunked_no_reduction_reference(*args: Any) -> Any:
    return torch.ops.torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default(*args)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="linear-cross-entropy",
        ops=(CHUNKED, CHUNKED_NO_REDUCTION),
        decompositions={CHUNKED: chunked_decomposition, CHUNKED_NO_REDUCTION: chunked_no_reduction_decomposition},
        references={CHUNKED: _chunked_reference, CHUNKED_NO_REDUCTION: _chunked_no_reduction_reference},
        input_strategies={CHUNKED: lambda: _calls(("mean", "sum")),
                          CHUNKED_NO_REDUCTION: lambda: _calls(("none",))},
        doc="F.linear_cross_entropy's chunked custom ops as linear + cross_entropy in acc_dtype (inference).",
    )
