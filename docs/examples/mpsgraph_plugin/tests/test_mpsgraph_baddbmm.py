"""The plugin's MPSGraph kernel against its reference, on any machine: shimkit builds the kernel's host module from
its Kernel record (the .mm files compiled as Objective-C++; on Linux against shimkit.objc's Metal and MPSGraph, which
run the graph on the CPU) and shimkit.testing draws the calls."""

import pytest
import torch

from mpsgraph_baddbmm import plugin
from shimkit.testing import assert_matches_reference, assert_plugin_matches_reference
from shimkit.testing.kernels import host_module

NAN, INF = float("nan"), float("inf")


def mpsgraph_baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """The compiled kernel, called as the c-shim is: the operands as they come and an out of the result's shape."""
    out = torch.empty(batch1.shape[0], batch1.shape[1], batch2.shape[2], dtype=batch1.dtype)
    host_module(plugin.KERNEL).baddbmm_out(out, self, batch1, batch2, beta=beta, alpha=alpha)
    return out


def test_kernel_equals_the_reference_on_drawn_calls(register_plugin):
    """Hypothesis over the plugin's input strategy: float32, float16 and bfloat16, empty sizes, NaN and inf,
    broadcast self. The values make every float32 sum exact, so the kernel must equal the reference exactly."""
    register_plugin(plugin)
    assert_plugin_matches_reference("mpsgraph-baddbmm", kernels={plugin.BADDBMM: mpsgraph_baddbmm}, rtol=0, atol=0)


def tensor(values, dtype):
    return torch.tensor(values, dtype=torch.float32).to(dtype)


CASES = {
    # beta == 0 ignores self: its NaN must not show
    "beta0_nan_self": lambda dt: ((tensor([[[NAN]]], dt), tensor([[[1.0, 2.0]]], dt), tensor([[[3.0], [4.0]]], dt)),
                                  {"beta": 0.0}),
    # inf times zero is NaN, even with alpha == 0
    "inf_times_zero_alpha0": lambda dt: ((tensor([1.0], dt), tensor([[[INF]]], dt), tensor([[[0.0, 1.0]]], dt)),
                                         {"alpha": 0.0}),
    # inner size 0: the product is zeros, out is beta * self
    "inner_empty": lambda dt: ((tensor([[1.5, -2.0]], dt), torch.empty(3, 1, 0, dtype=dt),
                                torch.empty(3, 0, 2, dtype=dt)), {"beta": 0.5}),
    # self expanded (stride 0), as Inductor hands over a bias it broadcast: its memory holds one row
    "expanded_self": lambda dt: ((tensor([1.5, -2.0], dt).expand(2, 3, 2), tensor([[[0.25] * 4] * 3] * 2, dt),
                                  tensor([[[1.0, -1.0]] * 4] * 2, dt)), {"beta": -2.0}),
    # no batch: out is empty
    "batch_empty": lambda dt: ((tensor([1.0], dt), torch.empty(0, 2, 3, dtype=dt), torch.empty(0, 3, 1, dtype=dt)),
                               {}),
    # rounded once: the product 1 + u/2 + u/32 (u: the dtype's spacing at 1) rounds up to 1 + u on its own, and
    # adding self's -u/4 to that rounds up again; the exact 1 + u/4 + u/32 rounds down to 1
    "rounded_once": lambda dt: ((tensor([[[-ULP[dt] / 4]]], dt), tensor([[[1.0, ULP[dt] / 2 + ULP[dt] / 32]]], dt),
                                 tensor([[[1.0], [1.0]]], dt)), {}),
}
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_cases(case, dtype):
    args, kwargs = CASES[case](dtype)
    assert_matches_reference(mpsgraph_baddbmm, plugin.baddbmm_reference, args, kwargs, rtol=0, atol=0)


def test_operands_of_different_dtypes_are_refused():
    out, self = torch.empty(1, 1, 1), torch.zeros(1)
    with pytest.raises(ValueError, match="batch2 is bfloat16 but batch1 is float32"):
        host_module(plugin.KERNEL).baddbmm_out(out, self, torch.ones(1, 1, 2), torch.ones(1, 2, 1, dtype=torch.bfloat16))


def test_strided_operands_are_refused():
    batch2 = torch.ones(1, 3, 2).transpose(1, 2)  # [1, 2, 3] with strides [6, 1, 2]
    with pytest.raises(ValueError, match=r"batch2 of sizes \[1, 2, 3\] and strides \[6, 1, 2\] is not dense"):
        host_module(plugin.KERNEL).baddbmm_out(torch.empty(1, 2, 3), torch.zeros(3), torch.ones(1, 2, 2), batch2)
