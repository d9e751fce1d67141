"""The metal-pointwise plugin: sinh, cosh, asinh, acosh and logical_xor in functions Inductor's Metal
codegen has, on Metal only, matching ATen at the values where textbook formulas break."""

from __future__ import annotations

import math
import textwrap

import pytest
import torch
from hypothesis import settings

import shimkit.plugins.metal_pointwise as metal_pointwise
from shimkit.audit.report import to_json
from shimkit.audit.runner import run_audit
from shimkit.backend import backend_config, new_registry
from shimkit.testing import assert_plugin_matches_reference

CLEAN_ENV = {"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}
UNARY = {torch.sinh: metal_pointwise.sinh_decomposition, torch.cosh: metal_pointwise.cosh_decomposition,
         torch.asinh: metal_pointwise.asinh_decomposition, torch.acosh: metal_pointwise.acosh_decomposition}
# Where the textbook forms fail: cancellation near 0, overflow of e**x or x*x before the result
# overflows, the domain edge of acosh, signed zeros, infinities and NaN.
SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-7, -3e-4, 0.5, 1.0, 1.0 + 2 ** -20, 19.99, 20.0, 88.5, 89.3, -89.3, 90.0,
           2.0 ** 28, 3e30, -3e30, 3.4e38, math.inf, -math.inf, math.nan, -1.0, -0.5]


def _correctly_rounded(reference, x: torch.Tensor) -> torch.Tensor:
    # ATen's own float32 kernel is no reference: its vectorised sinh/cosh overflow to inf at 89.3 on AVX2
    # hosts (the true value, 3.03e38, is finite) and not on others, so the test would depend on the host.
    return reference(x.double()).to(x.dtype)


def _same(result: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    torch.testing.assert_close(result, expected, rtol=rtol, atol=0.0, equal_nan=True)
    zeros = expected == 0
    assert torch.equal(result[zeros].signbit(), expected[zeros].signbit()), "sign of zero differs"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reference", list(UNARY), ids=lambda f: f.__name__)
def test_special_values_match_aten(reference, dtype):
    x = torch.tensor(SPECIAL, dtype=torch.float32).to(dtype)
    result = UNARY[reference](x)
    assert result.dtype == dtype
    _same(result, _correctly_rounded(reference, x), rtol=4 * float(torch.finfo(dtype).eps))



def test_special_values_hold_under_atens_scalar_kernels_too():
    """The decompositions run on ATen's kernels, whose results at the special values differ between its
    vectorised builds and its scalar one (sinh's overflow at 89.3 on AVX2): the special values are checked
    again in a process that runs ATen at ``ATEN_CPU_CAPABILITY=default``, whatever ISA this host has."""
    import os
    import subprocess
    import sys

    environment = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", __file__,
                           "-k", "test_special_values_match_aten"], capture_output=True, text=True, env=environment,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "12 passed" in done.stdout, done.stdout[-2000:]


def test_integer_and_bool_inputs_give_floats_as_aten():
    for reference, decomposition in UNARY.items():
        for x in (torch.arange(-3, 4), torch.tensor([True, False])):
            _same(decomposition(x), reference(x), rtol=1e-6)
    a, b = torch.tensor([0, 2, 0, -1]), torch.tensor([0.0, -0.0, math.nan, 0.5])
    assert torch.equal(metal_pointwise.logical_xor_decomposition(a, b), torch.logical_xor(a, b))


def test_the_decompositions_match_aten_on_generated_inputs():
    assert_plugin_matches_reference("metal-pointwise", settings=settings(max_examples=200, derandomize=True,
                                                                         deadline=None, database=None))


def test_textbook_forms_would_fail_the_check():
    x = torch.tensor(SPECIAL, dtype=torch.float32)
    naive_sinh = (torch.exp(x) - torch.exp(-x)) / 2  # cancels near 0, overflows past 88.7
    naive_asinh = torch.log(x + torch.sqrt(x * x + 1))  # cancels for negative x, overflows for huge |x|
    for naive, reference in ((naive_sinh, torch.sinh), (naive_asinh, torch.asinh)):
        with pytest.raises(AssertionError):
            _same(naive, _correctly_rounded(reference, x), rtol=4 * float(torch.finfo(torch.float32).eps))


def test_decomposed_on_metal_only():
    sinh = torch.ops.aten.sinh.default
    assert sinh in new_registry(env=CLEAN_ENV).backend_config("mps").decomposition_table
    assert sinh not in new_registry(env=CLEAN_ENV).backend_config("cuda").decomposition_table


MODEL = textwrap.dedent("""
    import torch

    class Hyperbolic(torch.nn.Module):
        def forward(self, x, mask):
            return torch.sinh(x) * torch.cosh(x) + torch.asinh(x) + torch.acosh(x.abs() + 1), torch.logical_xor(x, mask)

    def model():
        return Hyperbolic(), (torch.linspace(-3, 3, 24).reshape(4, 6), torch.arange(24).reshape(4, 6) % 3 == 0)
""")


def test_a_model_stock_cannot_generate_lowers_clean_with_the_right_numbers(tmp_path):
    path = tmp_path / "hyperbolic.py"
    path.write_text(MODEL)
    stock = to_json(run_audit([f"{path}:model"], plugins=False))["models"][0]
    assert stock["status"] == "error" and stock["failure"]["phase"] == "codegen"
    assert "NotImplementedError" in stock["failure"]["message"]
    shimkit = to_json(run_audit([f"{path}:model"], check_numerics=True))["models"][0]
    assert shimkit["status"] == "clean" and shimkit["numerics"]["ok"]


def test_hypot_scales_where_the_textbook_form_overflows_and_is_decomposed_before_to_edge():
    a = torch.tensor([3e30, -2e38, 1e-30, math.inf, math.nan, 0.0, 5.0])
    b = torch.tensor([4e30, 1e38, 1e-30, math.nan, -math.inf, -0.0, math.nan])
    _same(metal_pointwise.hypot_decomposition(a, b), torch.hypot(a, b), rtol=4 * float(torch.finfo(torch.float32).eps))
    with pytest.raises(AssertionError):  # squares overflow (and underflow) before the result does
        _same(torch.sqrt(a * a + b * b), torch.hypot(a, b), rtol=4 * float(torch.finfo(torch.float32).eps))
    half = a.nan_to_num(posinf=6e4).clamp(-6e4, 6e4).half()
    assert metal_pointwise.hypot_decomposition(half, half).dtype == torch.float16

    class Hypot(torch.nn.Module):
        def forward(self, x, y):
            return torch.hypot(x, y)

    config = backend_config("mps")
    assert torch.ops.aten.hypot.default in config.pre_edge_decomposition_table
    prepared = config.prepare_for_edge(torch.export.export(Hypot(), (a, b)))
    assert torch.ops.aten.hypot.default not in {n.target for n in prepared.graph.nodes}
    _same(prepared.module()(a, b), torch.hypot(a, b), rtol=4 * float(torch.finfo(torch.float32).eps))
