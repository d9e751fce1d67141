"""``aten::logcumsumexp`` as a log-step scan whose combine is ATen's ``log(exp(x) + exp(y))``.

``aten.logcumsumexp`` is not core ATen, so ``torch.logcumsumexp`` stops in ``to_edge`` on every backend.
``log(exp(a) + exp(b))`` is associative, so the prefix scan of ``plugins/cumsum.py``
(:func:`~shimkit.plugins.cumsum.log_step_scan`: ``ceil(log2(n))`` steps for the largest size the dimension
can take, declined for an unbounded dynamic one) computes it with this combine instead of ``add``, from
``-inf``. Each combine is shifted by its larger operand, ``max + log1p(exp(min - max))``, so no prefix
overflows or underflows where ATen's running value does not: no global shift is needed.

Semantics kept from ATen (``_log_add_exp_helper``): NaN anywhere in a prefix makes the rest NaN; two equal
infinities combine to themselves (``inf`` with ``inf`` is ``inf``, ``-inf`` with ``-inf`` is ``-inf``, where
the formula would give NaN), ``inf`` with ``-inf`` is ``inf``; ``-inf`` is the identity, exactly. half and
bfloat16 scan in float32 and round once, as ATen accumulates them; ``dim`` may be negative and is
range-checked; a 0-d tensor is returned as it is. Terms are combined in a different order than ATen's
sequential loop, so results agree to rounding. Complex and integer inputs (ATen computes the former and
refuses the latter) are declined.
"""

from __future__ import annotations

import torch

from shimkit.plugins.cumsum import log_step_scan
from shimkit.plugins.shared import ACCUMULATE_IN_FLOAT32, float32_tensors
from shimkit.registry import DecompositionDeclined, OpPlugin, hookimpl

LOGCUMSUMEXP = "aten::logcumsumexp.default"


def log_add_exp(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log(exp(x) + exp(y))`` as ATen's ``_log_add_exp_helper`` computes it, NaN and infinities included."""
    smaller, larger = torch.minimum(x, y), torch.maximum(x, y)
    same_infinity = (smaller == larger) & torch.isinf(smaller)
    return torch.where(same_infinity, x, torch.log1p(torch.exp(smaller - larger)) + larger)


def logcumsumexp_decomposition(self: torch.Tensor, dim: int) -> torch.Tensor:
    if not self.is_floating_point():
        raise DecompositionDeclined(f"logcumsumexp of {self.dtype} values: only real floating-point ones are "
                                    f"decomposed")
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if self.dim() == 0:
        return self.clone()
    values = self.float() if self.dtype in ACCUMULATE_IN_FLOAT32 else self
    return log_step_scan(values, dim % rank, log_add_exp, float("-inf"), "logcumsumexp").to(self.dtype)


def logcumsumexp_inputs():
    """``logcumsumexp(self, dim)`` calls: 0-d to 3-d, sizes from 0, every dim (negative too); float32 values
    spread over a range where ``exp`` overflows (``|x|`` up to 200), with NaN and both infinities."""
    from hypothesis import strategies as st

    floats = (st.floats(-200, 200, width=32) | st.floats(-3, 3, width=32)
              | st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    shapes = st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple)
    return shapes.flatmap(lambda shape: st.tuples(
        float32_tensors(shape, floats), st.integers(-max(len(shape), 1), max(len(shape), 1) - 1)))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="logcumsumexp",
        ops=(LOGCUMSUMEXP,),
        decompositions={LOGCUMSUMEXP: logcumsumexp_decomposition},
        # Not core ATen: without this, torch.logcumsumexp stops in to_edge before any backend sees it.
        pre_edge=(LOGCUMSUMEXP,),
        references={LOGCUMSUMEXP: torch.logcumsumexp},
        input_strategies={LOGCUMSUMEXP: logcumsumexp_inputs},
        doc="logcumsumexp as a log-step scan of ATen's log-add-exp (max-shifted per combine).",
    )
