"""Exit statuses that mean one thing (issue 48, part 3): 1 for findings in the model, each naming the op, the node,
the user's source line and what would fix it; 2 only where the audit could not run.

The findings: an op ``to_edge`` refuses (not core ATen), an op or data-dependent decision ``torch.export`` refuses,
and a data-dependent output size the Metal runtime cannot read (``aoti_torch_get_size``: what ``--execute`` finds
unlinkable, predicted by the plain audit). ``torch.mode`` stands for the non-core ops: no built-in plugin
decomposes it, so the test plugins here are the only ones that can.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from shimkit.audit import run_audit
from shimkit.audit.linkage import runtime_api, unserved
from shimkit.audit.recorder import RUNTIME, KernelCall
from shimkit.audit.report import render_text, to_json
from shimkit.backend import new_registry
from shimkit.registry import OpPlugin, hookimpl

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))
MODE = "aten::mode.default"


def _write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


MODE_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            return torch.mode(y, dim=-1).values  # the mode line

    def make():
        return Model(), (torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 5.0, 5.0]]),)
"""

NONZERO_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x)  # the nonzero line

    def make():
        return Model(), (torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]]),)
"""


def _mode_last_dim(x, dim=-1, keepdim=False):
    """``torch.mode`` over the last dim in core ATen ops: the smallest of the most frequent values, and the last
    index holding it."""
    assert dim in (-1, x.dim() - 1) and not keepdim, "the test decomposition covers the last dim only"
    counts = (x.unsqueeze(-1) == x.unsqueeze(-2)).sum(-1)
    most = counts.amax(-1, keepdim=True)
    values = torch.where(counts == most, x, torch.full_like(x, float("inf"))).amin(-1)
    positions = torch.arange(x.shape[-1]).expand_as(x)
    indices = torch.where(x == values.unsqueeze(-1), positions, torch.full_like(positions, -1)).amax(-1)
    return values, indices


class ModePlugin:
    """A plugin decomposing ``aten::mode`` before ``to_edge`` (``pre_edge``), or after it (``pre_edge=False``)."""

    def __init__(self, name: str = "test_mode", pre_edge: bool = True) -> None:
        self.name, self.pre_edge = name, pre_edge

    @hookimpl
    def shimkit_op_plugins(self):
        yield OpPlugin(name=self.name, ops=(MODE,), decompositions={MODE: _mode_last_dim},
                       pre_edge=(MODE,) if self.pre_edge else ())


def _registry(*plugins, blocked: str = ""):
    registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1", "SHIMKIT_BLOCK_PLUGINS": blocked})
    for plugin in plugins:
        registry.register(plugin, name=plugin.name)
    return registry


def _shimkit(*args: str) -> tuple[int, dict]:
    done = subprocess.run([SHIMKIT, "audit", "--quiet", "--no-cache", "--json", "-j", "1", *args],
                          capture_output=True, text=True, timeout=600, env=os.environ)
    return done.returncode, json.loads(done.stdout)


def test_the_decomposition_used_by_the_test_plugin_is_torch_mode():
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 5.0, 5.0], [7.0, 6.0, 6.0, 7.0]])
    values, indices = _mode_last_dim(x)
    assert torch.equal(values, torch.mode(x, dim=-1).values)
    assert torch.equal(x.gather(-1, indices.unsqueeze(-1)).squeeze(-1), values)


def test_an_op_to_edge_refuses_is_a_finding_naming_op_node_line_and_the_pre_edge_hook(tmp_path):
    spec = _write(tmp_path, "mode_model", MODE_MODEL) + ":make"
    document = to_json(run_audit([spec], registry=_registry()))
    (model,) = document["models"]
    failure = model["failure"]
    assert (model["status"], failure["kind"], failure["phase"]) == ("stopped", "stopped", "to_edge")
    assert failure["op"] == MODE
    assert failure["node"]["target"] == MODE and "mode" in failure["node"]["name"]
    assert failure["source"]["code"].endswith("# the mode line") and failure["source"]["file"].endswith("mode_model.py")
    assert failure["node"]["source"] == failure["source"]
    # upstream's advice (switch the verifier off) is not shimkit's: the fix is a pre_edge decomposition
    assert "There are a few things to try" not in failure["message"]
    assert "is not in Core ATen opset" in failure["message"]
    (fix,) = failure["fixes"]
    assert "no plugin decomposes aten::mode.default before to_edge" in fix and "pre_edge" in fix
    assert document["exit_code"] == 1 and document["summary"]["stopped"] == 1
    text = render_text(document)
    assert "STOPPED" in text and "# the mode line" in text and f"fix: {fix}" in text


def test_the_fix_names_the_plugin_that_would_act_and_why_it_did_not(tmp_path):
    spec = _write(tmp_path, "mode_model", MODE_MODEL) + ":make"

    def fixes(registry, plugins=True):
        (model,) = to_json(run_audit([spec], plugins=plugins, registry=registry))["models"]
        assert model["status"] == "stopped", model["failure"]
        return model["failure"]["fixes"]

    (blocked,) = fixes(_registry(ModePlugin(), blocked="test_mode"))
    assert "plugin 'test_mode'" in blocked and "SHIMKIT_BLOCK_PLUGINS" in blocked
    (stock,) = fixes(_registry(ModePlugin()), plugins=False)
    assert "plugin 'test_mode'" in stock and "--no-plugins" in stock
    (late,) = fixes(_registry(ModePlugin(pre_edge=False)))
    assert "applied after to_edge" in late and "pre_edge" in late
    # and the fix works: with the plugin active the model lowers
    (model,) = to_json(run_audit([spec], registry=_registry(ModePlugin()), check_numerics=True))["models"]
    assert model["status"] == "clean", model["failure"]


def test_what_export_refuses_in_the_model_is_a_finding_at_the_models_line(tmp_path):
    spec = _write(tmp_path, "export_stops", """
        class Branch(torch.nn.Module):
            def forward(self, x):
                if torch.nonzero(x).shape[0] > 2:  # the data-dependent branch
                    return x * 2
                return x

        class Equal(torch.nn.Module):
            def forward(self, x):
                return x if torch.equal(x, x.flip(0)) else x + 1  # the equal line

        def branch():
            return Branch(), (torch.randn(4),)

        def equal():
            return Equal(), (torch.randn(4),)
    """)
    document = to_json(run_audit([f"{spec}:branch", f"{spec}:equal"], registry=_registry()))
    branch, equal = document["models"]
    for model, line in ((branch, "# the data-dependent branch"), (equal, "# the equal line")):
        failure = model["failure"]
        assert (model["status"], failure["phase"]) == ("stopped", "export"), failure
        assert failure["source"]["code"].endswith(line)
        assert failure["fixes"]
    assert "torch.cond" in branch["failure"]["fixes"][0] and "data-dependent" in branch["failure"]["message"]
    assert equal["failure"]["op"] == "aten::equal.default"
    assert document["exit_code"] == 1


def _nonzero_without_size_accessor():
    """The built-in nonzero plugin's shim and kernel without its ``aoti_torch_get_size.cpp``: ExecuTorch's Metal
    runtime as it is, which the program returning nonzero's result does not link against."""
    from shimkit.plugins import nonzero
    from shimkit.registry import Kernel, Shim

    kernel = Kernel(name="nonzero", directory=nonzero.KERNEL.directory, msl=nonzero.KERNEL.msl, uses_sdk=False,
                    runtime_sources=tuple(s for s in nonzero.KERNEL.runtime_sources if "get_size" not in s))

    class NonzeroKernelAlone:
        name = "nonzero-kernel-alone"

        @hookimpl
        def shimkit_op_plugins(self):
            yield OpPlugin(name="nonzero-kernel-alone", ops=(nonzero.NONZERO,),
                           shims=(Shim(op=nonzero.NONZERO, device="mps", symbol="aoti_torch_mps_nonzero",
                                       recorded_names=("at::_ops::nonzero::call",), kernel=kernel),))

    return _registry(NonzeroKernelAlone(), blocked="nonzero")


def test_a_data_dependent_output_size_the_runtime_cannot_read_is_a_finding_in_every_mode(tmp_path):
    """The plain audit flags what --execute finds unlinkable (tests/test_metal_program_adapters.py: the program
    links only with the nonzero plugin's aoti_torch_get_size), and --check-numerics agrees."""
    spec = _write(tmp_path, "nonzero_model", NONZERO_MODEL) + ":make"
    for check_numerics in (False, True):
        (model,) = to_json(run_audit([spec], check_numerics=check_numerics,
                                     registry=_nonzero_without_size_accessor()))["models"]
        assert model["status"] == "missing" and model["missing"] == ["aoti_torch_get_size"], model
        (kernel,) = [k for k in model["kernels"] if k["status"] == "missing"]
        assert kernel["mechanism"] == RUNTIME and kernel["op"] == "aten::nonzero.default"
        assert kernel["nodes"][0]["source"]["code"].endswith("# the nonzero line")
        (fix,) = kernel["fixes"]
        assert "Metal runtime does not provide" in fix and "make the size static" in fix
        # the kernel itself is served: only the size read is not
        assert any(k["name"] == "at::_ops::nonzero::call" and k["status"] == "supported" for k in model["kernels"])


def test_the_static_form_the_fix_suggests_lowers_clean_with_nothing_read_from_the_runtime(tmp_path):
    spec = _write(tmp_path, "nonzero_model", NONZERO_MODEL) + ":make"
    (model,) = to_json(run_audit([spec], registry=_nonzero_without_size_accessor()))["models"]
    assert to_json(run_audit([spec]))["models"][0]["status"] == "clean"  # the built-in ships the accessor
    (fix,) = [k for k in model["kernels"] if k["status"] == "missing"][0]["fixes"]
    assert "torch.argsort(x.flatten() == 0, stable=True)" in fix and "(x != 0).sum()" in fix
    spec = _write(tmp_path, "static_model", """
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.argsort(x.flatten() == 0, stable=True), (x != 0).sum()

        def make():
            return Model(), (torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]]),)
    """) + ":make"
    (model,) = to_json(run_audit([spec], check_numerics=True))["models"]
    assert model["status"] == "clean", model


def test_a_runtime_function_is_served_by_the_runtime_api_or_a_plugins_runtime_source(tmp_path):
    assert "aoti_torch_get_sizes" in runtime_api() and "aoti_torch_get_size" not in runtime_api()
    get_size = KernelCall("aoti_torch_get_size", RUNTIME)
    get_sizes = KernelCall("aoti_torch_get_sizes", RUNTIME)
    declared = tmp_path / "declared.cpp"
    declared.write_text('extern "C" int aoti_torch_get_size(void* tensor, long d, long* out);\n')
    defined = tmp_path / "defined.cpp"
    defined.write_text('extern "C" int aoti_torch_get_size(void* tensor, long d,\n    long* out) {\n  return 0;\n}\n')

    class Config:
        def __init__(self, *sources):
            self.kernel_sources = sources

    assert unserved([get_size, get_sizes], None) == [get_size]
    assert unserved([get_size], Config(str(declared))) == [get_size]  # a declaration serves nothing
    assert unserved([get_size], Config(str(declared), str(defined))) == []


def test_exit_1_for_findings_and_2_only_when_the_audit_could_not_run(tmp_path):
    stops = _write(tmp_path, "mode_model", MODE_MODEL) + ":make"
    code, document = _shimkit(stops, "seed_split_linear")
    assert code == document["exit_code"] == 1, document
    assert [m["status"] for m in document["models"]] == ["stopped", "clean"]
    assert document["summary"]["stopped"] == 1
    code, document = _shimkit(stops, "no_such_model")
    assert code == document["exit_code"] == 2 and document["status"] == "incomplete"
    assert [m["status"] for m in document["models"]] == ["stopped", "error"]


@pytest.mark.parametrize("statuses, code", [
    (["clean"], 0), (["clean", "missing"], 1), (["stopped"], 1), (["wrong", "stopped"], 1),
    (["stopped", "unchecked"], 2), (["missing", "error"], 2), (["limitation"], 2)])
def test_exit_status_of_a_report(statuses, code):
    from shimkit.audit.report import exit_code_of

    assert exit_code_of([{"status": s} for s in statuses]) == code
