"""The long-tail plugins against PyTorch's own OpInfo samples (torch.testing._internal.common_methods_invocations),
inputs nobody here chose: every float32 sample, and the half-precision ones where the op supports them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import shimkit.plugins.addmv as addmv
import shimkit.plugins.baddbmm as baddbmm
from shimkit.plugins.addmm import addmm_decomposition
import shimkit.plugins.metal_pointwise as metal_pointwise
import shimkit.plugins.sort as sort
import shimkit.plugins.upsample_aa as upsample_aa
from shimkit.metal import compile_shader

OPS = {op.name: op for op in op_db}


def samples(name: str, dtype: torch.dtype):
    return list(OPS[name].sample_inputs("cpu", dtype, requires_grad=False))


SCALED_PRODUCTS = {"addmm": addmm_decomposition, "addmv": addmv.addmv_decomposition,
                   "baddbmm": baddbmm.baddbmm_decomposition}


def _poisoned(sample, dtype):
    """The sample with NaN and inf in its product's operands and ``alpha=0``: where ATen multiplies by the
    zero alpha NaN shows, where it skips the product (BLAS) it does not."""
    a, b = (t.clone() for t in sample.args[:2])
    if a.numel():
        a[(0,) * a.dim()] = float("nan")
        a[(-1,) * a.dim()] = float("inf")
    return sample.input, (a, b), {**sample.kwargs, "alpha": 0}


@pytest.mark.parametrize("name", sorted(SCALED_PRODUCTS))
@pytest.mark.parametrize("dtype", sorted(OPS["addmm"].supported_dtypes("cpu"), key=str))
def test_scaled_product_decompositions_match_aten_on_opinfo_samples(name, dtype):
    """Every OpInfo sample (integer ones with fractional ``beta``/``alpha`` among them) in every dtype ATen
    supports, and each floating one again with NaN and inf in the product and ``alpha=0``: equal to ATen."""
    if dtype not in OPS[name].supported_dtypes("cpu"):
        pytest.skip(f"ATen's {name} does not support {dtype} on the CPU")
    cases = [(s.input, s.args, s.kwargs) for s in samples(name, dtype)]
    assert cases
    if dtype.is_floating_point or dtype.is_complex:
        cases += [_poisoned(s, dtype) for s in samples(name, dtype)]
    exact = not (dtype.is_floating_point or dtype.is_complex)
    for self, args, kwargs in cases:
        result = SCALED_PRODUCTS[name](self, *args, **kwargs)
        expected = OPS[name].op(self, *args, **kwargs)
        assert result.dtype == expected.dtype and result.shape == expected.shape
        # half types: ATen's CPU kernels and the decomposition (float32, rounded once) may round differently
        tolerance = ({"rtol": 0, "atol": 0} if exact else {} if dtype not in (torch.float16, torch.bfloat16)
                     else {"rtol": 0, "atol": float(torch.finfo(dtype).eps) * 32})
        torch.testing.assert_close(result, expected, equal_nan=True, **tolerance,
                                   msg=lambda m, k=kwargs: f"{name} {dtype} {k}: {m}")


POINTWISE = {"sinh": metal_pointwise.sinh_decomposition, "cosh": metal_pointwise.cosh_decomposition,
             "asinh": metal_pointwise.asinh_decomposition, "acosh": metal_pointwise.acosh_decomposition,
             "logical_xor": metal_pointwise.logical_xor_decomposition, "hypot": metal_pointwise.hypot_decomposition}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_metal_pointwise_decompositions_on_opinfo_samples(name, dtype):
    cases = samples(name, dtype)
    assert cases
    reference = OPS[name].op
    for sample in cases:
        result = POINTWISE[name](sample.input, *sample.args, **sample.kwargs)
        expected = reference(sample.input, *sample.args, **sample.kwargs)
        # float32: torch's default tolerance; half types: computed in float32 and rounded once, as ATen
        # does, so at most one rounding apart.
        tolerance = {} if dtype == torch.float32 else {"rtol": float(torch.finfo(dtype).eps), "atol": 0.0}
        torch.testing.assert_close(result, expected, equal_nan=True, **tolerance)


@pytest.mark.parametrize("name, op", [("_upsample_bilinear2d_aa", upsample_aa.BILINEAR_AA)])
def test_antialiased_resize_on_opinfo_samples(name, op):
    cases = samples(name, torch.float32)
    assert cases
    sized = upsample_aa._resize(op)
    for sample in cases:
        kwargs = dict(sample.kwargs)
        expected = OPS[name].op(sample.input, *sample.args, **kwargs)
        if "scale_factors" in kwargs:  # the .vec overload
            result = upsample_aa._vec(sized)(sample.input, kwargs["output_size"], kwargs["align_corners"],
                                             kwargs["scale_factors"])
        else:
            result = sized(sample.input, list(kwargs["output_size"]), kwargs["align_corners"], kwargs["scales_h"],
                           kwargs["scales_w"])
        torch.testing.assert_close(result, expected, msg=lambda m, k=kwargs: f"{k}: {m}")


@pytest.fixture(scope="module")
def sort_library():
    return compile_shader(Path(sort.KERNEL.msl_path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["sort", "argsort"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_the_msl_sort_on_opinfo_samples(sort_library, name, dtype):
    cases = samples(name, dtype)
    assert cases
    for sample in cases:
        # OpInfo passes sort's arguments positionally or by keyword: bind them as torch.sort does.
        dim, descending, stable = -1, False, None
        positional = list(sample.args)
        if positional and isinstance(positional[0], bool):  # sort(x, stable, dim, descending) form
            stable = positional.pop(0)
        if positional:
            dim = positional.pop(0)
        if positional:
            descending = positional.pop(0)
        dim = sample.kwargs.get("dim", dim)
        descending = sample.kwargs.get("descending", descending)
        stable = sample.kwargs.get("stable", stable)
        values, indices = sort.launch_sort(sort_library, sample.input, stable=stable, dim=dim, descending=descending)
        expected_values, expected_indices = torch.sort(sample.input, stable=True, dim=dim, descending=descending)
        torch.testing.assert_close(values, expected_values, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(indices, expected_indices)
