"""The addmv plugin: a pre-edge decomposition, so that torch.addmv reaches the backend at all."""

from __future__ import annotations

import textwrap

import pytest
import torch
from hypothesis import settings

from shimkit.audit.report import to_json
from shimkit.audit.runner import run_audit
from shimkit.backend import backend_config
from shimkit.registry import InvalidPluginRecord, OpPlugin
from shimkit.testing import assert_plugin_matches_reference

ADDMV = torch.ops.aten.addmv.default

MODEL = textwrap.dedent("""
    import torch

    class ScoreHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(-1, 1, 32).reshape(4, 8))
            self.bias = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            return torch.addmv(self.bias, self.weight, x.relu(), beta=0.5, alpha=2.0)

    def model():
        return ScoreHead(), (torch.linspace(-2, 2, 8),)
""")


def test_the_decomposition_matches_aten_with_the_shared_rules():
    assert_plugin_matches_reference("addmv", settings=settings(max_examples=150, derandomize=True, deadline=None,
                                                               database=None))


def test_addmv_is_decomposed_before_to_edge_and_nowhere_else():
    config = backend_config("mps")
    assert ADDMV in config.pre_edge_decomposition_table
    assert ADDMV not in config.decomposition_table


def test_prepare_for_edge_rewrites_only_programs_that_need_it():
    config = backend_config("mps")

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class WithAddmv(torch.nn.Module):
        def forward(self, b, m, v):
            return torch.addmv(b, m, v, beta=0.0, alpha=3.0)

    plain = torch.export.export(Plain(), (torch.ones(3),))
    assert config.prepare_for_edge(plain) is plain
    args = (torch.tensor([float("nan"), 1.0]), torch.arange(6.0).reshape(2, 3), torch.ones(3))
    prepared = config.prepare_for_edge(torch.export.export(WithAddmv(), args))
    targets = {n.target for n in prepared.graph.nodes if n.op == "call_function"}
    assert ADDMV not in targets and torch.ops.aten.mm.default in targets
    torch.testing.assert_close(prepared.module()(*args), torch.tensor([9.0, 36.0]))  # beta == 0: NaN ignored


def test_the_audit_lowers_addmv_with_shimkit_and_shows_the_stock_failure(tmp_path):
    (tmp_path / "score_head.py").write_text(MODEL)
    spec = f"{tmp_path / 'score_head.py'}:model"
    (stock,) = to_json(run_audit([spec], plugins=False))["models"]
    assert stock["status"] == "stopped" and stock["failure"]["phase"] == "to_edge"
    assert "aten.addmv.default is not in Core ATen opset" in stock["failure"]["message"]
    (fixed,) = to_json(run_audit([spec], plugins=True, check_numerics=True))["models"]
    assert fixed["status"] == "clean", fixed["failure"]
    assert fixed["numerics"]["ok"] and fixed["numerics"]["checks"]


def test_pre_edge_ops_need_a_decomposition():
    with pytest.raises(InvalidPluginRecord, match="pre_edge names ops without a decomposition: aten::mv.default"):
        OpPlugin(name="bad", ops=("aten::mv", "aten::addmv"), pre_edge=("aten::mv",),
                 decompositions={"aten::addmv": lambda *a, **k: None}, eliminated_by={"aten::mv": "x"})
    with pytest.raises(InvalidPluginRecord, match="pre_edge must be a sequence of ops, not one string"):
        OpPlugin(name="bad", ops=("aten::addmv",), pre_edge="aten::addmv",
                 decompositions={"aten::addmv": lambda *a, **k: None})
