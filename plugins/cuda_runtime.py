"""ExecuTorch's own CUDA runtime: the fallback kernels it ships and the graph passes its backend runs.

Upstream ``CudaBackend`` writes these by hand (``get_supported_fallback_kernels``, ``get_custom_passes``);
with the registry in charge of the backend (:func:`shimkit.integration.registry_backend`) they come from
here, so nothing upstream has is lost:

* the kernels of ``backends/cuda/runtime/shims`` (a stable sort, int4 weight-packed matmul, ``randint``),
  under both names Inductor records for them (``tests/test_plugin_cuda_runtime.py`` reads upstream's
  list from its source and fails when the two drift apart);
* ``move_cond_predicate_to_cpu`` and ``replace_int64_floordiv``, upstream's passes. The first only runs
  where the program has a ``torch.cond``: elsewhere it changes nothing, yet ends by validating the edge
  program, which rejects the views ``AotiPartitioner`` itself keeps. That is why stock fails the seed
  repro (``split`` then ``Linear``: ``Cannot preserve operator aten.split.Tensor because it is a view``);
* ``triton_kernels``: upstream's replacement of SDPA and top-k by its Triton kernels, applied only where
  those kernels accept the node. Upstream replaces every SDPA, and its kernel takes bfloat16 alone, so a
  float32 ``F.scaled_dot_product_attention`` fails to lower stock (``Expected bfloat16 inputs``); here
  such nodes stay ATen SDPA, which Inductor generates itself.

The passes import upstream (and through it triton) when they first have something to do, on a machine
lowering for CUDA; deriving the CUDA configuration needs neither.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import torch

from shimkit.passes import PassContext, PassError, ShimkitPass
from shimkit.registry import OpPlugin, PassSpec, Shim, hookimpl

SORT = "aten::sort.stable"
INT4PACK_MM = "aten::_weight_int4pack_mm.default"
RANDINT_LOW = "aten::randint.low_out"

# (op, shim symbol, the other name Inductor records for the call, if any)
RUNTIME_KERNELS = (
    (SORT, "aoti_torch_cuda_sort_stable", "at::_ops::sort_stable::call"),
    (INT4PACK_MM, "aoti_torch_cuda__weight_int4pack_mm", "at::_ops::_weight_int4pack_mm::call"),
    (RANDINT_LOW, "aoti_torch_cuda_randint_low_out", None),
)


def sort_reference(self: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                   descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sort(self, stable=bool(stable), dim=dim, descending=descending)


def _runtime_plugin() -> OpPlugin:
    shims = tuple(Shim(op=op, device="cuda", symbol=symbol, recorded_names=(recorded,) if recorded else (),
                       provided_by_runtime=True) for op, symbol, recorded in RUNTIME_KERNELS)
    return OpPlugin(
        name="cuda-runtime-kernels",
        ops=tuple(op for op, _, _ in RUNTIME_KERNELS),
        shims=shims,
        references={SORT: sort_reference, INT4PACK_MM: torch.ops.aten._weight_int4pack_mm.default},
        doc="The fallback kernels ExecuTorch's CUDA runtime ships (backends/cuda/runtime/shims).",
    )


def _custom_op_plugins() -> list[OpPlugin]:
    """ExecuTorch's quantized ``executorch_cuda::int{4,5,6,8}_plain_mm``, where upstream's CUDA backend
    imports (it registers the ops and holds their C prototypes; it needs triton, without which nothing
    lowers for CUDA anyway, so the import is not even tried)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return []
    try:
        from executorch.backends.cuda.cuda_backend import CudaBackend
    except ImportError:
        return []
    table = CudaBackend._get_custom_ops_to_c_shim_options().get("aot_inductor.custom_ops_to_c_shims", {})
    plugins = []
    for op, prototypes in table.items():
        schema = op.name().rsplit(".", 1)[0] if hasattr(op, "name") else str(op)
        short = schema.split("::")[1]
        plugins.append(OpPlugin(
            name=f"cuda-{short.replace('_', '-')}",
            ops=(op,),
            shims=(Shim(op=op, device="cuda", symbol=f"aoti_torch_cuda_{short}", recorded_names=(schema,),
                        c_prototype=prototypes[0], provided_by_runtime=True),),
            references={op: op},
            doc=f"ExecuTorch's CUDA runtime kernel for {schema}.",
        ))
    return plugins


_TRITON_CANDIDATES = (torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.topk.default)


def has_triton_candidates(graph: torch.fx.Graph) -> bool:
    """Whether the graph holds an op upstream has a Triton kernel for (SDPA, top-k; as ATen or edge ops)."""
    return any(getattr(node.target, "_op", node.target) in _TRITON_CANDIDATES
               for node in graph.nodes if node.op == "call_function")


def has_cond(graph: torch.fx.Graph) -> bool:
    """Whether the top-level graph calls ``torch.cond`` (the only nodes ``MoveCondPredicateToCpuPass`` moves)."""
    return any(graph.find_nodes(op="call_function", target=torch.ops.higher_order.cond))


class UpstreamCudaPass(ShimkitPass):
    """One of upstream's CUDA passes, imported when it first has something to do (:meth:`applies`),
    reporting upstream's own ``modified`` flag to the pipeline."""

    upstream: ClassVar[tuple[str, str]] = ("", "")  # (module, class)

    def __init__(self) -> None:
        self._pass: Any = None

    def applies(self, graph: torch.fx.Graph) -> bool:
        return True

    def make_upstream(self) -> Any:
        module, name = self.upstream
        return getattr(importlib.import_module(module), name)()

    def transform(self, graph: torch.fx.Graph, context: PassContext) -> bool:
        if not self.applies(graph):
            return False
        target = context.exported_program if self.requires_exported_program else context.module
        if target is None:
            raise PassError(self.pass_name, None, "upstream's pass needs the "
                            + ("ExportedProgram" if self.requires_exported_program else "GraphModule"))
        if self._pass is None:
            self._pass = self.make_upstream()
        return bool(getattr(self._pass(target), "modified", False))


class MoveCondPredicateToCpu(UpstreamCudaPass):
    name = "move_cond_predicate_to_cpu"
    requires_exported_program = True
    upstream = ("executorch.backends.cuda.passes.move_cond_predicate_to_cpu", "MoveCondPredicateToCpuPass")

    def applies(self, graph: torch.fx.Graph) -> bool:
        return has_cond(graph)


class ReplaceInt64FloorDiv(UpstreamCudaPass):
    name = "replace_int64_floordiv"
    upstream = ("executorch.backends.cuda.passes.replace_int64_floordiv", "ReplaceInt64FloorDivWithFloatPass")


class TritonKernelsWhereAccepted(UpstreamCudaPass):
    """Upstream's ``ReplaceEdgeOpWithTritonOpPass``, skipping the SDPA nodes its Triton kernel rejects."""

    name = "triton_kernels"

    def applies(self, graph: torch.fx.Graph) -> bool:
        return has_triton_candidates(graph)

    def make_upstream(self) -> Any:
        return _accepting_replacement_pass()


# The widest key block of triton.sdpa's power-of-2 kernel (its autotuning configs' largest BLOCK_N).
TRITON_SDPA_KEY_BLOCK = 128


def sdpa_accepted_by_triton(node: torch.fx.Node) -> bool:
    """Whether ExecuTorch's Triton SDPA (``triton.sdpa``) takes this SDPA node and computes it right:
    bfloat16 4-D query, key and value, no dropout, no mask or a bool one, causal only with equal lengths.

    And, without a mask or causality, a key length that is a static multiple of 128 where the head size is
    a power of 2: that kernel loads the keys past the end of the last block as zeros and never masks their
    scores (its non-power-of-2 twin does), so every padded key takes part in the softmax. On the H100,
    (1, 4, 16, 64) bfloat16 attention came out with an error of 1.09 against 0.006 for eager
    (docs/cuda.md); such nodes stay ATen SDPA, which Inductor generates."""
    def value(index: int, name: str, default: Any) -> Any:
        return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)

    tensors = [value(i, n, None) for i, n in enumerate(("query", "key", "value"))]
    metas: list[Any] = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in tensors]
    if not all(isinstance(m, torch.Tensor) and m.dtype == torch.bfloat16 and m.dim() == 4 for m in metas):
        return False
    mask = value(3, "attn_mask", None)
    mask_value = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
    if mask is not None and not (isinstance(mask_value, torch.Tensor) and mask_value.dtype == torch.bool):
        return False
    if value(4, "dropout_p", 0.0) != 0.0:
        return False
    query_length, key_length, head_size = metas[0].shape[2], metas[1].shape[2], metas[0].shape[3]
    if value(5, "is_causal", False):
        return isinstance(query_length, int) and query_length == key_length
    if mask is None and not (isinstance(head_size, int) and head_size & (head_size - 1)):
        return isinstance(key_length, int) and key_length % TRITON_SDPA_KEY_BLOCK == 0
    return True


def _accepting_replacement_pass() -> Any:
    from executorch.backends.cuda.triton.replacement_pass import ReplaceEdgeOpWithTritonOpPass
    from executorch.exir.dialects._ops import ops as exir_ops

    class ReplaceWhereAccepted(ReplaceEdgeOpWithTritonOpPass):
        def _should_replace_node(self, node: torch.fx.Node) -> bool:
            if not super()._should_replace_node(node):
                return False
            if node.target == exir_ops.edge.aten.scaled_dot_product_attention.default:
                return sdpa_accepted_by_triton(node)
            return True

    return ReplaceWhereAccepted()


@hookimpl
def shimkit_op_plugins():
    yield _runtime_plugin()
    yield from _custom_op_plugins()


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="move_cond_predicate_to_cpu",
        factory=lambda capabilities: MoveCondPredicateToCpu(),
        devices=("cuda",),
        # First, as upstream runs it: it validates the whole program, which shimkit's decompositions leave
        # holding ops outside core ATen (aten.t, aten.arange) that only Inductor needs to accept.
        before=("replace_int64_floordiv", "decompose_linear"),
        doc="torch.cond predicates held in constant buffers moved to the CPU (upstream's pass).",
    )
    yield PassSpec(
        name="replace_int64_floordiv",
        factory=lambda capabilities: ReplaceInt64FloorDiv(),
        devices=("cuda",),
        before=("triton_kernels",),
        doc="int64 floor division through float where exact (upstream's pass).",
    )
    yield PassSpec(
        name="triton_kernels",
        factory=lambda capabilities: TritonKernelsWhereAccepted(),
        devices=("cuda",),
        before=("decompose_linear",),
        doc="SDPA and top-k replaced by ExecuTorch's Triton kernels where those accept the node.",
    )
