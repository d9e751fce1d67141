"""Provenance in every report (issue 48, part 2): which plugin provided each kernel and each decomposed op, who
else claimed it (left out, blocked) and why the winner won; ``shimkit audit --explain OP`` for one op.

The plugin guide's ``my-cdist`` (docs/plugins.md) claims ``aten::cdist`` at priority 1 over the built-in ``cdist``
plugin; blocked (``SHIMKIT_BLOCK_PLUGINS=my_cdist``), the built-in takes over, and the report must say so.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from registry_helpers import CLEAN_ENV, Records, kernel_plugin
from shimkit.audit import run_audit
from shimkit.audit.cli import configure_parser, run
from shimkit.audit.report import render_text, to_json
from shimkit.backend import new_registry, use_registry
from shimkit.registry import OpPlugin

CDIST, CDIST_FORWARD = "aten::cdist.default", "aten::_cdist_forward.default"
MODE = "aten::mode.default"


def cdist_decomposition(x1, x2, p=2.0, compute_mode=None):
    """docs/plugins.md's: pairwise p-norm distances from differences."""
    differences = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    return differences.pow(p).sum(-1).pow(1.0 / p)


MY_CDIST = OpPlugin(name="my-cdist", priority=1, ops=(CDIST, CDIST_FORWARD),
                    decompositions={CDIST: cdist_decomposition, CDIST_FORWARD: cdist_decomposition})


def _mode_last_dim(x, dim=-1, keepdim=False):
    counts = (x.unsqueeze(-1) == x.unsqueeze(-2)).sum(-1)
    values = x.masked_fill(counts != counts.amax(-1, keepdim=True), float("inf")).amin(-1)
    return values, (x == values.unsqueeze(-1)).int().argmax(-1)


MODE_PLUGIN = OpPlugin(name="test_mode", ops=(MODE,), decompositions={MODE: _mode_last_dim}, pre_edge=(MODE,))


def _registry(blocked: str = "", **plugins: OpPlugin):
    """A registry of the built-ins and ``plugins``, each registered from code under its keyword."""
    registry = new_registry(env={**CLEAN_ENV, "SHIMKIT_BLOCK_PLUGINS": blocked})
    for name, record in plugins.items():
        registry.register(Records(record), name=name)
    return registry


def _model(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return f"{path}:make"


def _cdist_model(tmp_path: Path) -> str:
    return _model(tmp_path, "cdist_model", """
        class Model(torch.nn.Module):
            def forward(self, a, b):
                return torch.cdist(a, b)  # the cdist line

        def make():
            return Model(), (torch.randn(4, 3), torch.randn(5, 3))
    """)


def _decomposition(model: dict, op: str) -> dict:
    (found,) = [d for d in model["decompositions"] if d["op"] == op]
    return found


def test_a_decomposition_names_its_plugin_and_the_plugin_it_won_over(tmp_path):
    document = to_json(run_audit([_cdist_model(tmp_path)], registry=_registry(my_cdist=MY_CDIST)))
    (model,) = document["models"]
    assert model["status"] == "clean", model["failure"]
    cdist = _decomposition(model, CDIST)
    assert (cdist["plugin"], cdist["stage"]) == ("my-cdist", "plugin_decompositions")
    assert cdist["source"].startswith("registered from code 'my_cdist'")
    assert cdist["nodes"][0]["source"]["code"].endswith("# the cdist line")
    (builtin,) = cdist["claims"]
    assert (builtin["plugin"], builtin["status"]) == ("cdist", "left out")
    assert builtin["why"] == "'my-cdist' wins: its priority 1 is higher than that of 'cdist' (0)"
    text = render_text(document)
    assert "decomposed aten::cdist.default by plugin 'my-cdist' (registered from code 'my_cdist'" in text
    assert "also claimed by 'cdist' (built-in 'cdist' (shimkit.plugins.cdist), priority 0)" in text
    assert "left out ('my-cdist' wins: its priority 1 is higher than that of 'cdist' (0))" in text


def test_blocking_the_users_plugin_shows_the_builtin_taking_over(tmp_path):
    document = to_json(run_audit([_cdist_model(tmp_path)], registry=_registry(blocked="my_cdist", my_cdist=MY_CDIST)))
    (model,) = document["models"]
    assert model["status"] == "clean", model["failure"]  # the built-in cdist plugin serves it: not MISSING
    cdist = _decomposition(model, CDIST)
    assert cdist["plugin"] == "cdist" and cdist["source"] == "built-in 'cdist' (shimkit.plugins.cdist)"
    (mine,) = cdist["claims"]
    assert (mine["plugin"], mine["status"]) == ("my-cdist", "blocked")
    text = render_text(document)
    assert "decomposed aten::cdist.default by plugin 'cdist' (built-in 'cdist' (shimkit.plugins.cdist))" in text
    assert "also claimed by 'my-cdist'" in text and "blocked (SHIMKIT_BLOCK_PLUGINS names it)" in text


def test_a_kernel_names_its_plugin_and_the_blocked_plugin_that_also_ships_it(tmp_path):
    spec = _model(tmp_path, "mm_model", """
        class Model(torch.nn.Module):
            def forward(self, a, b):
                return a @ b

        def make():
            return Model(), (torch.randn(4, 3), torch.randn(3, 5))
    """)
    other = kernel_plugin("other-mm", symbol="aoti_torch_mps_mm_out", op="aten::mm", priority=5)
    registry = _registry(blocked="other_mm", other_mm=other)
    document = to_json(run_audit([spec], registry=registry))
    (model,) = document["models"]
    (kernel,) = [k for k in model["kernels"] if k["name"] == "aoti_torch_mps_mm_out"]
    provider = kernel["provider"]
    assert (provider["plugin"], provider["op"]) == ("mm", "aten::mm.default")
    assert [(c["plugin"], c["status"]) for c in provider["claims"]] == [("other-mm", "blocked")]
    text = render_text(document)
    assert "aoti_torch_mps_mm_out  c-shim          plugin 'mm' (built-in 'mm' (shimkit.plugins.mm))" in text
    assert "also claimed by 'other-mm'" in text


def test_a_pre_edge_decomposition_is_named_with_its_stage(tmp_path):
    spec = _model(tmp_path, "mode_model", """
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.mode(x, dim=-1).values  # the mode line

        def make():
            return Model(), (torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 5.0, 5.0]]),)
    """)
    document = to_json(run_audit([spec], registry=_registry(test_mode=MODE_PLUGIN)))
    (model,) = document["models"]
    assert model["status"] == "clean", model["failure"]
    mode = _decomposition(model, MODE)
    assert (mode["plugin"], mode["stage"]) == ("test_mode", "pre_edge")
    assert mode["nodes"][0]["source"]["code"].endswith("# the mode line")
    assert ("decomposed aten::mode.default by plugin 'test_mode' (registered from code 'test_mode' "
            "(registry_helpers)), before to_edge") in render_text(document)


def _cli(*argv: str) -> tuple[int, str, str]:
    """``shimkit audit ARGV`` in this process (the registry is the one ``use_registry`` set)."""
    args = configure_parser(argparse.ArgumentParser(prog="shimkit audit")).parse_args(list(argv))
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(args, stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def test_the_text_and_markdown_reports_list_every_contested_claim_with_its_winner_and_why(tmp_path):
    report = tmp_path / "report.md"
    with use_registry(_registry(my_cdist=MY_CDIST)):
        code, text, _ = _cli("--quiet", "--no-cache", "-j", "1", "--report", str(report), _cdist_model(tmp_path))
    assert code == 0, text
    why = "its priority 1 is higher than that of 'cdist' (0)"
    assert f"the decomposition of {CDIST} on mps: 'my-cdist' wins over 'cdist': {why}" in text
    markdown = report.read_text()
    assert "## What provided each kernel and decomposition" in markdown
    assert (f"| `{CDIST}` | decomposed (plugin_decompositions) | `my-cdist` (registered from code 'my_cdist' "
            in markdown)
    assert "`cdist`: left out |" in markdown
    assert f"| the decomposition of {CDIST} | mps | `my-cdist` | `cdist` | {why} |" in markdown


def test_explain_prints_every_claim_per_device_and_who_provides_it():
    with use_registry(_registry(my_cdist=MY_CDIST)):
        code, text, _ = _cli("--explain", "aten::cdist")
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == CDIST
    assert "  on mps: 'my-cdist' provides it (contested by 'cdist': its priority 1 is higher than that of " \
           "'cdist' (0))" in lines
    assert "  on cuda: 'my-cdist' provides it (the only active claimant)" in lines  # the built-in is mps-only
    assert any("'cdist' (built-in 'cdist' (shimkit.plugins.cdist), priority 0) offers decomposition on mps: "
               "elsewhere" in line for line in lines)
    with use_registry(_registry(blocked="my_cdist", my_cdist=MY_CDIST)):
        code, text, _ = _cli("--explain", "cdist", "--json")
    explained = json.loads(text)
    assert explained["devices"]["mps"]["provider"] == "cdist"
    assert {(c["plugin"], c["status"]) for c in explained["devices"]["mps"]["claims"]} == {
        ("cdist", "provides"), ("my-cdist", "blocked")}
    assert explained["devices"]["cuda"]["provider"] is None


def test_explain_names_a_shim_and_the_decomposition_it_beats():
    other = OpPlugin(name="mm-decomposed", ops=("aten::mm",),
                     decompositions={"aten::mm": lambda a, b: (a[:, :, None] * b).sum(1)})
    with use_registry(_registry(mm_decomposed=other)):
        code, text, _ = _cli("--explain", "aten::mm.default")
    assert code == 0
    assert "  on mps: 'mm' provides it (the only active claimant)" in text
    assert "offers mps shim aoti_torch_mps_mm_out" in text
    assert "'mm-decomposed' (registered from code 'mm_decomposed'" in text
    assert "left out (the mps shim of 'mm' wins over a decomposition)" in text
    assert "  on cuda: 'mm-decomposed' provides it (the only active claimant)" in text


@pytest.mark.parametrize("argv, message", [
    (["--explain", "aten::cdst"], "no op aten::cdst.default is defined by torch"),
    (["--explain", "aten::cdist", "seed_split_linear"], "--explain audits nothing; it takes no models"),
])
def test_explain_refuses_what_it_cannot_explain(argv, message):
    code, text, error = _cli(*argv)
    assert code == 2 and not text and message in error
    if "cdst" in argv[1]:
        assert "did you mean aten::cdist.default" in error


def test_a_misspelt_op_is_refused_while_parsing_before_torch_is_imported():
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "shimkit", "audit", "--explain", "aten::cd-ist"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert ("argument --explain: takes an op such as aten::cdist or aten::cdist.default, got 'aten::cd-ist'"
            in done.stderr)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "shimkit.audit.cli" in imported and "torch" not in imported
