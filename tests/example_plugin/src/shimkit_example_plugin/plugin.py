"""A third-party op plugin, discovered through the ``shimkit`` entry-point group.

On mps it ships a kernel: ``csrc/logaddexp.metal``, an MSL kernel the runtime dispatches through
shimkit's generated adapter as ``aoti_torch_mps_logaddexp_out``, with the package's own compiled C++
(``shimkit_example_plugin._kernels``) as the host module. Every other device decomposes the op into ops
Inductor generates code for. The eager reference and an input strategy let ``shimkit.testing`` check
the decomposition, the MSL kernel (through ``shimkit.metal``) and the C++ kernel.
"""

from pathlib import Path

import torch

from shimkit.registry import Kernel, MslKernel, OpPlugin, Shim, hookimpl

LOGADDEXP = "aten::logaddexp.default"
KERNEL = Kernel(
    name="example_logaddexp",
    directory=str(Path(__file__).resolve().parent / "csrc"),
    runtime_sources=("logaddexp.metal",),
    msl=MslKernel(source="logaddexp.metal", function="logaddexp"),
    host_module="shimkit_example_plugin._kernels",
    entry_points=("logaddexp",),
)


def logaddexp_decomposition(a, b):
    """``log(exp(a) + exp(b))`` without overflow: ``max + log1p(exp(-|a - b|))``.

    Equal infinities are handled as torch does: ``logaddexp(inf, inf) = inf`` and
    ``logaddexp(-inf, -inf) = -inf`` (``a - b`` would be NaN there).
    """
    larger = torch.maximum(a, b)
    same_infinity = torch.isinf(a) & (a == b)
    spread = torch.where(same_infinity, torch.zeros_like(a), -(a - b).abs())
    return torch.where(same_infinity, a, larger + torch.log1p(torch.exp(spread)))


def logaddexp_inputs():
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    import numpy as np

    shape = hnp.array_shapes(min_dims=1, max_dims=3, max_side=5)
    values = st.floats(-1e4, 1e4, width=32) | st.sampled_from([np.inf, -np.inf])
    return shape.flatmap(lambda s: st.tuples(
        hnp.arrays(np.float32, s, elements=values).map(torch.from_numpy),
        hnp.arrays(np.float32, s, elements=values).map(torch.from_numpy)))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="example-logaddexp",
        ops=(LOGADDEXP,),
        shims=(Shim(op=LOGADDEXP, device="mps", symbol="aoti_torch_mps_logaddexp_out", kernel=KERNEL),),
        decompositions={LOGADDEXP: logaddexp_decomposition},
        references={LOGADDEXP: torch.logaddexp},
        input_strategies={LOGADDEXP: logaddexp_inputs},
        doc="logaddexp: an MSL kernel on mps; max + log1p(exp(-|a-b|)) on devices with no logaddexp shim.",
    )
