"""A third-party op plugin, discovered through the ``shimkit`` entry-point group.

It teaches every device without a ``logaddexp`` shim to decompose the op into ops Inductor generates
code for, and carries the eager reference and an input strategy so ``shimkit.testing`` can check the
decomposition.
"""

import torch

from shimkit.registry import OpPlugin, hookimpl

LOGADDEXP = "aten::logaddexp.default"


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
        decompositions={LOGADDEXP: logaddexp_decomposition},
        references={LOGADDEXP: torch.logaddexp},
        input_strategies={LOGADDEXP: logaddexp_inputs},
        doc="logaddexp as max + log1p(exp(-|a-b|)), for devices with no logaddexp shim.",
    )
