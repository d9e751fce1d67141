"""``aten::baddbmm`` on ExecuTorch's Metal runtime as one MPSGraph: ``beta * self + alpha * (batch1 @ batch2)``.

The runtime has ``bmm_out`` but no ``baddbmm_out``, so without this plugin shimkit decomposes ``baddbmm`` into
``bmm`` plus a scaled add on mps (its built-in ``baddbmm`` plugin). This one ships the c-shim
``aoti_torch_mps_baddbmm_out`` instead: the product and the scaled add in a single graph, float32 arithmetic
rounded once to float16 or bfloat16. Its ``Kernel`` is Objective-C++ over Metal and MPSGraph, and shimkit builds
and runs it on Linux too (against shimkit.objc's Metal and MPSGraph on the CPU): the host module for the tests,
the c-shim inside whole programs (``shimkit audit --execute``).
"""

from pathlib import Path

import torch

from shimkit.registry import Kernel, OpCall, OpPlugin, Shim, hookimpl

BADDBMM = "aten::baddbmm.default"
KERNEL = Kernel(
    name="mpsgraph_baddbmm",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("baddbmm_graph.mm", "baddbmm_shim_mps.mm"),            # ExecuTorch's Metal runtime
    host_sources=("baddbmm_graph.mm", "baddbmm_host.mm", "baddbmm_bindings.cpp"),  # the host module, for tests
    entry_points=("baddbmm_out",),
)
HALF_PRECISION = (torch.float16, torch.bfloat16)


def baddbmm_reference(self, batch1, batch2, *, beta=1, alpha=1):
    """ATen's ``baddbmm``, float16 and bfloat16 computed in float32 and rounded once."""
    if batch1.dtype in HALF_PRECISION:
        return torch.baddbmm(self.float(), batch1.float(), batch2.float(), beta=beta, alpha=alpha).to(batch1.dtype)
    return torch.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)


def baddbmm_inputs():
    """``OpCall((self, batch1, batch2), {beta, alpha})`` in float32, float16 or bfloat16: sizes 0 to 4 (empty
    tensors included), ``self`` full or broadcast, values that every dtype holds exactly (quarters up to 8, so that
    float32 products and sums are exact in any order) with NaN and infinities among them."""
    from hypothesis import strategies as st

    values = st.integers(-32, 32).map(lambda q: q / 4) | st.sampled_from([float("nan"), float("inf"), -float("inf")])

    def tensor(shape, dtype):
        count = 1
        for size in shape:
            count *= size
        return st.lists(values, min_size=count, max_size=count).map(
            lambda v: torch.tensor(v, dtype=torch.float32).reshape(shape).to(dtype))

    def call(sizes, dtype):
        b, n, k, m = sizes
        self_shape = st.sampled_from([(b, n, m), (n, m), (m,), (1, 1, m), (n, 1), ()])
        return st.builds(lambda s, x, y, beta, alpha: OpCall((s, x, y), {"beta": beta, "alpha": alpha}),
                         self_shape.flatmap(lambda shape: tensor(shape, dtype)),
                         tensor((b, n, k), dtype), tensor((b, k, m), dtype),
                         st.sampled_from([1.0, 0.0, 0.5, -2.0]), st.sampled_from([1.0, 0.0, 0.25, -1.5]))

    sizes = st.tuples(*[st.integers(0, 4)] * 4)
    dtypes = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])
    return st.tuples(sizes, dtypes).flatmap(lambda drawn: call(*drawn))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="mpsgraph-baddbmm",
        ops=(BADDBMM,),
        # The runtime hands the kernel dense operands (shimkit makes the generated program copy strided ones).
        shims=(Shim(op=BADDBMM, device="mps", symbol="aoti_torch_mps_baddbmm_out", kernel=KERNEL,
                    dense_operands=("self", "batch1", "batch2")),),
        references={BADDBMM: baddbmm_reference},
        input_strategies={BADDBMM: baddbmm_inputs},
        doc="baddbmm as one MPSGraph on mps (product and scaled add; float32 arithmetic, one rounding).",
    )
