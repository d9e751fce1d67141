"""tools/upstream_metal_modules.py's machinery, on a registry of this test's own in the format of upstream's
``backends/apple/metal/tests/test_modules.py`` (CI cannot fetch upstream's; docs/upstream-metal-tests.md has the
run over it)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TOOL = Path(__file__).resolve().parents[1] / "tools" / "upstream_metal_modules.py"

# Upstream's interface, written small: a registry of entries and the three helpers its test calls. The
# module is SDPA with head_dim 256 (Gemma3's and Qwen 3.5 MoE's), its key a strided parameter and its mask made in
# forward in float32 whatever the model's dtype, as upstream's sdpa_strided_broadcast_attn_mask makes it (a bf16
# run once failed: the runtime's kernel reads the mask as query's type); here an ALiBi-like bias, not zeros.
REGISTRY = """
import torch
from torch import nn

try:
    import torchao.experimental.ops.mps  # noqa: F401  raises RuntimeError off macOS, as in upstream's file

    TORCHAO_AVAILABLE = True
except ImportError:
    TORCHAO_AVAILABLE = False

DEFAULT_TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2)}


class MaskedHeadDim256(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = nn.Parameter(torch.randn(1, 8, 2, 256))  # [B, T, H, D], attended as [B, H, T, D]

    def forward(self, query, value):
        key = self.key.transpose(1, 2)
        bias = -torch.arange(8).float().abs() / 4  # float32
        return nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias.expand(8, 8))


MODULE_REGISTRY = {
    "masked_head_dim_256": {"model_class": MaskedHeadDim256, "input_shapes": [(1, 2, 8, 256), (1, 2, 8, 256)],
                            "atol_bfloat16": 5e-2},
    "float32_only": {"model_class": nn.Identity, "input_shapes": [(4,)], "skip_bfloat16": "float32 only"},
}


def should_skip_model(name, dtype):
    skip = MODULE_REGISTRY[name].get("skip_" + str(dtype).removeprefix("torch."), False)
    return bool(skip), skip if isinstance(skip, str) else ""


def get_tolerances_for_model(name, dtype):
    entry, suffix = MODULE_REGISTRY[name], str(dtype).removeprefix("torch.")
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    return entry.get("atol_" + suffix, atol), entry.get("rtol_" + suffix, rtol)


def get_model_and_inputs(name, dtype=torch.float32):
    entry = MODULE_REGISTRY[name]
    model = entry["model_class"]().eval().to(dtype)
    return model, tuple(torch.randn(*shape, dtype=dtype) for shape in entry["input_shapes"])
"""


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("upstream_metal_modules", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture
def upstream_tree(tmp_path):
    tests = tmp_path / "backends" / "apple" / "metal" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_modules.py").write_text(textwrap.dedent(REGISTRY))
    return str(tmp_path)


def test_a_registry_entry_is_built_by_its_helpers_executed_and_judged_at_its_tolerance(tool, upstream_tree):
    stand_in = "torchao.experimental.ops.mps"
    had_stand_in = stand_in in sys.modules
    upstream, notes = tool.load_upstream(upstream_tree)
    assert upstream.TORCHAO_AVAILABLE and "stubbed" in dict(notes)[stand_in]
    assert (stand_in in sys.modules) == had_stand_in  # the stand-in lived only while the file loaded

    result = tool.run_registry_entry(upstream_tree, ("masked_head_dim_256", "bfloat16"))
    assert result.status == "clean", result.reason
    assert (result.atol, result.rtol) == (5e-2, 1e-2)
    assert result.passed and result.ones.passed and result.example.passed
    assert result.example.max_abs_error < 5e-2 and result.ones.max_abs_error is not None
    assert "**pass**" in tool.markdown([result])

    skipped = tool.run_registry_entry(upstream_tree, ("float32_only", "bfloat16"))
    assert (skipped.status, skipped.reason, skipped.passed) == ("skipped", "float32 only", True)


def test_upstream_judgement_is_allclose_on_every_output(tool):
    expected = [torch.tensor([1.0, 100.0]), torch.tensor([0.0])]
    within = tool.judge([torch.tensor([1.005, 100.9]), torch.tensor([0.005])], expected, atol=1e-2, rtol=1e-2)
    assert within.passed and within.max_abs_error == pytest.approx(0.9, rel=1e-5)
    assert within.max_rel_error == pytest.approx(1.0)  # 0.005 against 0: upstream's relative error
    beyond = tool.judge([torch.tensor([1.0, 100.0]), torch.tensor([0.02])], expected, atol=1e-2, rtol=1e-2)
    assert not beyond.passed and beyond.max_abs_error == pytest.approx(0.02)
    assert "shape" in tool.judge([torch.zeros(3), torch.zeros(1)], expected, atol=1, rtol=1).error
