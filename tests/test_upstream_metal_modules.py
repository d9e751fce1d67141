"""tools/upstream_metal_modules.py's machinery, on a registry of this test's own in the format of upstream's
``backends/apple/metal/tests/test_modules.py`` (CI cannot fetch upstream's; docs/upstream-metal-tests.md has the
run over it)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TOOL = Path(__file__).resolve().parents[1] / "tools" / "upstream_metal_modules.py"

# Upstream's interface, written small: a registry of entries and the three helpers its test calls. One module is
# SDPA with head_dim 256 (Gemma3's and Qwen 3.5 MoE's), its key a strided parameter and its mask made in forward in
# float32 whatever the model's dtype, as upstream's sdpa_strided_broadcast_attn_mask makes it (a bf16 run once
# failed: the runtime's kernel reads the mask as query's type); here an ALiBi-like bias, not zeros. Another is a
# conv2d to which Inductor's layout optimisation hands channels-last operands, which upstream's op_convolution.mm
# reads as NCHW (pytorch/executorch#22951): wrong stock, right with shimkit.
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


class Conv2dChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


MODULE_REGISTRY = {
    "masked_head_dim_256": {"model_class": MaskedHeadDim256, "input_shapes": [(1, 2, 8, 256), (1, 2, 8, 256)],
                            "atol_bfloat16": 5e-2},
    "conv2d_channels_last": {"model_class": Conv2dChannelsLast, "input_shapes": [(1, 8, 8, 8)]},
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


def test_a_channels_last_conv2d_is_wrong_stock_as_pytorch_executorch_22951_says_and_passes_with_shimkit(
        tool, upstream_tree, tmp_path, capsys):
    """The command line, both configurations of one entry side by side: stock is ExecuTorch's Metal backend with
    no plugin (audit_loaded's config=None, as ``shimkit audit --no-plugins``), whose op_convolution.mm reads the
    channels-last operands Inductor hands it as NCHW; shimkit's keeps them contiguous. Stock failing is a
    finding, not the tool's failure: the exit status follows shimkit's runs."""
    report = tmp_path / "report.json"
    status = tool.main(["--upstream", upstream_tree, "--only", "conv2d_*", "--dtype", "float32", "--no-pr-22952",
                        "--json", str(report)])
    table = capsys.readouterr().out
    assert status == 0, table

    document = json.loads(report.read_text())
    assert (document["runtime_configs"], document["pr_22952"], document["exit_status"]) == (
        ["stock", "shimkit"], [], 0)
    (row,) = document["results"]
    assert (row["module"], row["dtype"]) == ("conv2d_channels_last", "float32")
    stock, shimkit = row["stock"], row["shimkit"]
    assert (stock["runtime"], stock["status"], stock["passed"]) == ("stock", "wrong", False)
    for words in ("aoti_torch_mps_convolution reads its channels-last input as a contiguous NCHW buffer",
                  "op_convolution.mm uses only sizes() (pytorch/executorch#22951)"):
        assert words in stock["reason"], stock["reason"]
    assert not stock["ones"]["passed"] and not stock["example"]["passed"]  # upstream's own comparison fails too
    assert stock["kernels"] == {"aoti_torch_mps_convolution": None}  # no plugin behind it, stock
    assert (shimkit["runtime"], shimkit["status"], shimkit["passed"]) == ("shimkit", "clean", True), shimkit["reason"]
    assert shimkit["ones"]["passed"] and shimkit["example"]["max_abs_error"] < 1e-5
    assert shimkit["kernels"] == {"aoti_torch_mps_convolution": "convolution"}

    (line,) = [line for line in table.splitlines() if line.startswith("| `conv2d_channels_last`")]
    cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]  # "\|" is a | in a cell
    assert cells[3:6] == ["wrong", cells[4], "FAIL"] and cells[6:9] == ["clean", cells[7], "**pass**"]
    assert "stock: as upstream's Metal runtime computes it" in cells[9] and "#22951" in cells[9]
    assert "stock: 0 of 1 pass; shimkit: 1 of 1 pass" in table and "The two differ on 1" in table
    assert tool.main(["--render", str(report)]) == 0 and capsys.readouterr().out == table  # from the JSON alone

    # A shimkit run that fails fails the tool; stock runs never do.
    failed = tool.Result("conv2d_channels_last", "float32", "wrong", runtime="shimkit")
    stock_result = tool.Result("conv2d_channels_last", "float32", "wrong", runtime="stock")
    assert tool.exit_status([stock_result], interrupted=False) == 0
    assert tool.exit_status([stock_result, failed], interrupted=False) == 1
    assert tool.exit_status([], interrupted=True) == 130


def test_the_pr_22952_conv2d_modules_join_upstreams_registry_in_its_format(tool, upstream_tree):
    upstream, _ = tool.load_upstream(upstream_tree, pr_22952=True)
    added = tool.pr_22952_entries(upstream)
    assert added == ["conv2d_plain", "conv2d_bias_batch2", "conv2d_stride2", "conv2d_depthwise",
                     "conv2d_depthwise_pointwise"]
    assert list(upstream.MODULE_REGISTRY)[-5:] == added  # after upstream's own
    for name in added:
        entry = upstream.MODULE_REGISTRY[name]
        assert set(entry) == {"model_class", "input_shapes", "description"}  # upstream's defaults for tolerances
        model, inputs = upstream.get_model_and_inputs(name, dtype=torch.bfloat16)  # upstream's helpers build them
        convolutions = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        assert convolutions and all(m.kernel_size == (3, 3) and m.in_channels >= 8 for m in convolutions)
        assert model(*inputs).dtype == torch.bfloat16
    assert upstream.get_tolerances_for_model("conv2d_plain", torch.float32) == (1e-5, 1e-5)
    assert upstream.MODULE_REGISTRY["conv2d_depthwise"]["model_class"]().conv.groups == 8
    assert tool.load_upstream(upstream_tree)[0].MODULE_REGISTRY.keys().isdisjoint(added)  # --no-pr-22952

    # An entry upstream already has (the pull request merged) is upstream's.
    theirs = {"conv2d_plain": {"model_class": torch.nn.Identity, "input_shapes": [(1,)]}}
    merged = type(upstream)("merged")
    merged.MODULE_REGISTRY = dict(theirs)
    assert tool.add_pr_22952(merged) == added[1:]
    assert merged.MODULE_REGISTRY["conv2d_plain"] is theirs["conv2d_plain"]
    assert tool.pr_22952_entries(merged) == added[1:]
