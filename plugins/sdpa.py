"""Scaled dot-product attention on mps: both versions of ``_scaled_dot_product_attention_math_for_mps``.

Inductor lowers SDPA on mps to these ATen ops and records the c-shim fallback as
``at::_ops::<op>::call``. The ``_v2`` op exists only in newer torch releases; naming it by string keeps
this plugin loadable everywhere.

The runtime's kernel (``runtime/ops/op_sdpa.mm``) is MLX's ``sdpa_vector`` instantiated for a head dim of 64,
96, 128 or 256 (query and value alike), 4-D operands and no dropout; anything else throws there, at run
time, on the Mac. Found by running whole programs on Linux (``shimkit audit --execute``): the bundled
``conformer_block`` and ``decoder_kv_cache`` (head dim 16) lowered clean and would have stopped at their
attention. Such calls are taken apart again after Inductor's own patterns (which fuse math attention into SDPA)
into ATen's math attention, matmuls and a safe softmax that Inductor generates; the kernel keeps the calls it
runs.
"""

import math

import torch

from torch import fx

from shimkit.passes.base import PassContext
from shimkit.passes.decompose import DECLINED_META, DecomposeInPlace
from shimkit.passes.operand_dtypes import cast_operands_to
from shimkit.registry import DecompositionDeclined, OpPlugin, PassSpec, Shim, hookimpl

VERSIONS = ("_scaled_dot_product_attention_math_for_mps",
            "_scaled_dot_product_attention_math_for_mps_v2")
KERNEL_HEAD_DIMS = (64, 96, 128, 256)


def runtime_runs(query: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float) -> bool:
    """Whether the Metal runtime's SDPA kernel takes this call (its checks, op_sdpa.mm)."""
    head_dim, value_dim = query.shape[-1], value.shape[-1]
    return (query.dim() == 4 and isinstance(head_dim, int) and head_dim in KERNEL_HEAD_DIMS
            and value_dim == head_dim and dropout_p == 0.0
            and (attn_mask is None or attn_mask.dtype != torch.bool))


def math_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """ATen's math attention (``_scaled_dot_product_attention_math``) from ops Inductor generates: ``(output,
    weights)``. A bool mask keeps where True; a row no key may attend to is all zeros (ATen's safe softmax)."""
    if enable_gqa and query.dim() >= 3 and key.shape[-3] != query.shape[-3]:
        repeats = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeats, -3), value.repeat_interleave(repeats, -3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    keep = None
    if is_causal:
        keep = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        keep = attn_mask if keep is None else keep & attn_mask
    elif attn_mask is not None:
        scores = (scores + attn_mask).to(scores.dtype)  # ATen adds the mask in place: scores keep their dtype
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, -1)
    weights = torch.where(scores.amax(-1, keepdim=True) == float("-inf"), torch.zeros_like(weights), weights)
    return torch.matmul(weights, value), weights


def for_mps_decomposition(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *,
                          scale=None, enable_gqa=False):
    """``_scaled_dot_product_attention_math_for_mps`` where the runtime's kernel cannot take it."""
    if runtime_runs(query, value, attn_mask, dropout_p):
        raise DecompositionDeclined(f"the Metal runtime's SDPA kernel runs head dim {query.shape[-1]}: kept for it")
    if dropout_p != 0.0 or dropout_mask is not None:
        raise DecompositionDeclined(f"dropout_p={dropout_p}: random dropout is left to the runtime")
    return math_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa)


class UnfuseSdpa(DecomposeInPlace):
    """Post-grad pass: Inductor's SDPA calls on mps that the runtime's kernel cannot run, as math attention.
    Post-grad, because Inductor's own ``fuse_attention`` patterns turn math attention back into SDPA before.
    The attention is traced through Inductor's decompositions, so that only ops it lowers are spliced in."""

    name = "unfuse_sdpa"

    def __init__(self) -> None:
        self.sdpa_ops = {getattr(torch.ops.aten, op).default for op in VERSIONS if hasattr(torch.ops.aten, op)}
        super().__init__({op: for_mps_decomposition for op in self.sdpa_ops}, name="unfuse_sdpa")

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        targets = [n for n in graph.nodes if n.op == "call_function" and n.target in self.sdpa_ops
                   and DECLINED_META not in n.meta]
        if targets and len(self.table) == len(self.sdpa_ops):  # Inductor is loaded by now; it is not at start-up
            from torch._inductor.decomposition import select_decomp_table

            self.table = {**{op: fn for op, fn in select_decomp_table().items()
                             if isinstance(op, torch._ops.OpOverload)}, **self.table}
        decomposed = sum(self.decompose(graph, node) for node in targets) > 0
        kept = [n for n in graph.nodes if n.op == "call_function" and n.target in self.sdpa_ops]
        # The kernel reads the mask as the query's type (op_sdpa.mm): a float32 mask of bf16 attention, cast.
        return decomposed | (sum(cast_operands_to(graph, node, [(3, "attn_mask")], (0, "query")) for node in kept) > 0)


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="sdpa",
        ops=tuple(f"aten::{op}.default" for op in VERSIONS),
        shims=tuple(
            Shim(op=f"aten::{op}.default", device="mps", symbol=f"aoti_torch_mps_{op}",
                 recorded_names=(f"at::_ops::{op}::call",), provided_by_runtime=True)
            for op in VERSIONS
        ),
        doc="SDPA math-for-mps v1 and v2, provided by the stock Metal runtime (runtime/ops/op_sdpa.mm).",
    )


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="unfuse_sdpa",
        factory=lambda capabilities: UnfuseSdpa(),
        devices=("mps",),
        stage="post_grad",
        before=("dense_bmm_operands",),
        doc="SDPA calls the Metal runtime's kernel cannot run (head dims other than 64/96/128/256) as math attention.",
    )
