"""The antialiased-resize plugin: ATen's (PIL's) separable weights as two matrix products."""

from __future__ import annotations

import textwrap

import pytest
import torch

import shimkit.plugins.upsample_aa as upsample_aa
from shimkit.audit.report import to_json
from shimkit.audit.runner import run_audit
from shimkit.registry import DecompositionDeclined
from shimkit.testing.properties import assert_decomposition_dynamic

ATEN = {upsample_aa.BILINEAR_AA: torch.ops.aten._upsample_bilinear2d_aa.default,
        upsample_aa.BICUBIC_AA: torch.ops.aten._upsample_bicubic2d_aa.default}
MODEL = textwrap.dedent("""
    import torch
    import torch.nn.functional as F

    class Thumbnails(torch.nn.Module):
        def forward(self, image):
            return (F.interpolate(image, size=(5, 7), mode="bilinear", antialias=True),
                    F.interpolate(image, scale_factor=0.5, mode="bicubic", antialias=True))

    def model():
        return Thumbnails(), (torch.linspace(-1, 1, 3 * 16 * 12).reshape(1, 3, 16, 12),)
""")


@pytest.mark.parametrize("shape, factors, align_corners", [
    ((1, 2, 9, 13), [0.5, 0.75], False), ((2, 1, 7, 5), [2.0, 1.5], False), ((1, 3, 16, 12), [0.25, 0.3], True),
    ((1, 1, 5, 8), [1.0, 0.5], False), ((1, 2, 11, 3), [3.0, 0.7], False)])
@pytest.mark.parametrize("vec_op, op", [(torch.ops.aten._upsample_bilinear2d_aa.vec, upsample_aa.BILINEAR_AA),
                                        (torch.ops.aten._upsample_bicubic2d_aa.vec, upsample_aa.BICUBIC_AA)])
def test_scale_factors_give_atens_sizes_and_weights(shape, factors, align_corners, vec_op, op):
    image = torch.linspace(-3, 3, torch.Size(shape).numel()).reshape(shape)
    expected = vec_op(image, None, align_corners, factors)
    result = upsample_aa._vec(upsample_aa._resize(op))(image, None, align_corners, factors)
    assert result.shape == expected.shape
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("op", sorted(ATEN))
@pytest.mark.parametrize("shape, output_size, align_corners",
                         [((1, 3, 7, 5), [3, 9], True), ((2, 1, 12, 9), [5, 4], False)])
def test_weights_are_traced_for_every_size_a_dynamic_image_takes(op, shape, output_size, align_corners):
    image = torch.linspace(-2, 3, torch.Size(shape).numel()).reshape(shape)
    assert_decomposition_dynamic(op, upsample_aa._resize(op), upsample_aa._reference(ATEN[op]),
                                 (image, output_size, align_corners, None, None), {})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_resized_in_float32_and_rounded_once(dtype):
    image = torch.linspace(-4, 4, 2 * 3 * 17 * 11).reshape(2, 3, 17, 11).to(dtype)
    for op, aten in ATEN.items():
        result = upsample_aa._resize(op)(image, [6, 5], False)
        expected = aten(image.float(), [6, 5], False, None, None).to(dtype)
        assert result.dtype == dtype
        torch.testing.assert_close(result, expected, rtol=0, atol=float(torch.finfo(dtype).eps) * 8)


def test_atens_one_pixel_wide_bug_is_not_copied():
    column = torch.tensor([0.0, 1.0, 2.0]).reshape(1, 1, 3, 1)
    aten = torch.ops.aten._upsample_bilinear2d_aa.default(column, [2, 1], False, None, None)
    assert aten.flatten().tolist() == pytest.approx([0.375, 0.375])  # ATen repeats the first row
    ours = upsample_aa._resize(upsample_aa.BILINEAR_AA)(column, [2, 1], False)
    assert ours.flatten().tolist() == pytest.approx([0.375, 1.625])
    row = column.transpose(2, 3)  # ATen gets the transposed image right: the same numbers
    assert torch.ops.aten._upsample_bilinear2d_aa.default(row, [1, 2], False, None, None).flatten().tolist() == (
        pytest.approx([0.375, 1.625]))


def test_integer_images_and_factors_of_dynamic_sizes_are_declined():
    with pytest.raises(DecompositionDeclined, match="fixed-point"):
        upsample_aa._resize(upsample_aa.BILINEAR_AA)(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), [2, 2], False)


def test_the_audit_lowers_antialiased_interpolation_with_shimkit(tmp_path):
    (tmp_path / "thumbnails.py").write_text(MODEL)
    spec = f"{tmp_path / 'thumbnails.py'}:model"
    (stock,) = to_json(run_audit([spec], plugins=False))["models"]
    assert sorted(stock["missing"]) == ["aten::_upsample_bicubic2d_aa", "aten::_upsample_bilinear2d_aa"]
    (fixed,) = to_json(run_audit([spec], plugins=True, check_numerics=True))["models"]
    assert fixed["status"] == "clean", fixed
    assert fixed["numerics"]["ok"]
    assert {k["name"] for k in fixed["kernels"]} <= {"aoti_torch_mps_mm_out", "aoti_torch_mps_bmm_out"}
