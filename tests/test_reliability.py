"""Reliability: broken plugins, hostile model files and interrupted audits never take shimkit down.

Each broken plugin is reported by name and skipped (raised under SHIMKIT_STRICT_PLUGINS=1); each bad
model input ends that model's audit with a message and leaves the report intact; the registry can be
built and queried from many threads at once. docs/reliability.md lists the cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest

from registry_helpers import CLEAN_ENV, install_distribution
from shimkit.backend import new_registry
from shimkit.registry import OpPlugin, PluginLoadError, hookimpl

SHIMKIT = str(Path(sys.executable).parent / "shimkit")
KERNEL = __import__("shimkit.plugins.addmm").plugins.addmm.KERNEL.runtime_paths[1]  # addmm_metal.mm

SLOW = """
import time
time.sleep(0.3)
from shimkit.registry import OpPlugin, hookimpl
@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name="slow-erfinv", ops=("aten::erfinv",), decompositions={"aten::erfinv": lambda x: x})
"""


def erfinv_shim_plugin(plugin_name: str, symbol: str = "aoti_torch_mps_erfinv", op: str = "aten::erfinv") -> str:
    return f"""
from shimkit.registry import Kernel, OpPlugin, Shim, hookimpl
KERNEL = Kernel(name="erfinv", directory={str(Path(KERNEL).parent)!r}, runtime_sources=({Path(KERNEL).name!r},))
@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name={plugin_name!r}, ops=({op!r},),
                   shims=(Shim(op={op!r}, device="mps", symbol={symbol!r}, kernel=KERNEL),))
"""


def test_a_slow_plugin_import_is_reported_and_still_loaded(tmp_path, monkeypatch):
    install_distribution(tmp_path, "slow", {"slow": "slow_plugin"}, {"slow_plugin": SLOW})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="entry point 'slow'.*slow: importing it took"):
        registry = new_registry(env={"SHIMKIT_SLOW_PLUGIN_SECONDS": "0.05"})
        assert [p.stage for p in registry.problems] == ["slow"]
    assert "slow-erfinv" in {entry.name for entry in registry.op_plugins()}
    monkeypatch.delitem(sys.modules, "slow_plugin")  # imported afresh: slow again
    with pytest.raises(PluginLoadError, match="slow"):
        new_registry(env={"SHIMKIT_SLOW_PLUGIN_SECONDS": "0.05", "SHIMKIT_STRICT_PLUGINS": "1"})


def test_two_packages_claiming_one_shim_keep_the_first_and_report_the_second(tmp_path, monkeypatch):
    # Distribution names without '-': the dist-info folder name splits name and version there.
    install_distribution(tmp_path, "dupa", {"dup-a": "dup_a"}, {"dup_a": erfinv_shim_plugin("erfinv-a")})
    install_distribution(tmp_path, "dupb", {"dup-b": "dup_b"},
                         {"dup_b": erfinv_shim_plugin("erfinv-b", symbol="aoti_torch_mps_erfinv_b")})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="entry point 'dup-b'.*conflict.*'erfinv-b' is left out"):
        registry = new_registry(env={})
        config = registry.backend_config("mps")
    assert config.capabilities.shims["aten::erfinv.default"].plugin == "erfinv-a"
    assert "aoti_torch_mps_erfinv_b" not in config.fallback_kernels
    (problem,) = registry.problems
    assert problem.stage == "conflict" and "'erfinv-a'" in problem.message
    registry.backend_config("cuda")
    registry.backend_config("mps")
    assert len(registry.problems) == 1  # derived again: reported once
    with pytest.raises(PluginLoadError, match="dup-b"):
        new_registry(env={"SHIMKIT_STRICT_PLUGINS": "1"}).backend_config("mps")


@pytest.mark.parametrize("discovered_first", ["dupb", "dupa"])
def test_a_tie_is_settled_by_name_whichever_package_is_found_first(tmp_path, discovered_first, capfd):
    """Two packages decomposing one op at equal priority, each in its own folder on the path, found in both
    orders: the same one wins (entry points go by entry-point name, then distribution name), and both
    ``shimkit plugins --json`` and the audit report say who won and who was left out."""
    from shimkit.audit.cli import main as audit_main
    from shimkit.backend import use_registry
    from shimkit.cli import plugins_report

    folders = {}
    for dist, entry, letter in (("dupa", "dup-a", "a"), ("dupb", "dup-b", "b")):
        folders[dist] = tmp_path / dist
        folders[dist].mkdir()
        install_distribution(folders[dist], dist, {entry: f"dup_{letter}"}, {f"dup_{letter}": f"""
import torch
from shimkit.registry import OpPlugin, hookimpl
def erfinv_{letter}(x):
    return torch.special.erfinv(x)
@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name="erfinv-{letter}", ops=("aten::erfinv.default",),
                   decompositions={{"aten::erfinv.default": erfinv_{letter}}})
"""})
    second = "dupa" if discovered_first == "dupb" else "dupb"
    path = [str(folders[discovered_first]), str(folders[second]), *sys.path]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", path)
        assert [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"] in folders] \
            == [discovered_first, second]
        with pytest.warns(UserWarning, match="entry point 'dup-b'.*'erfinv-b' is left out"):
            registry = new_registry(env={})
            report = plugins_report(registry)
        conflict = {"device": "mps", "what": "the decomposition of aten::erfinv.default", "winner": "erfinv-a",
                    "left_out": ["erfinv-b"], "settled_by": "order"}

        def has_conflict(conflicts, explained: bool = False) -> bool:  # the audit's also say why, in words
            return any({key: c.get(key) for key in conflict} == conflict and (c.get("why") or not explained)
                       for c in conflicts)

        assert has_conflict(report["conflicts"])
        assert [(p["source"]["name"], p["stage"]) for p in report["problems"]] == [("dup-b", "conflict")]
        assert registry.backend_config("mps").capabilities.decompositions["aten::erfinv.default"].plugin == "erfinv-a"
        capfd.readouterr()
        with use_registry(registry):
            assert audit_main(["--json", "--quiet", "--no-cache", "-j", "1", "seed_split_linear"]) == 0
    assert has_conflict(json.loads(capfd.readouterr().out)["plugin_conflicts"], explained=True)


def test_a_package_reusing_a_builtin_c_symbol_is_left_out(tmp_path, monkeypatch):
    install_distribution(tmp_path, "clash", {"clash": "clash_plugin"},
                         {"clash_plugin": erfinv_shim_plugin("erfinv-clash", symbol="aoti_torch_mps_mm_out")})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="kernel name 'aoti_torch_mps_mm_out'.*'erfinv-clash' is left out"):
        config = new_registry(env={}).backend_config("mps")
    assert config.provider_of("aoti_torch_mps_mm_out").plugin == "mm"
    assert "aten::erfinv.default" not in config.capabilities.shims


def test_the_registry_is_built_and_queried_from_eight_threads_at_once():
    shared = new_registry(env=CLEAN_ENV)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def work():
        try:
            barrier.wait()
            own = new_registry(env=CLEAN_ENV)
            config = shared.backend_config("mps")
            results.append((tuple(sorted(e.name for e in own.op_plugins())),
                            tuple(sorted(config.fallback_kernels)), len(shared.problems)))
        except Exception as error:  # collected: an exception in a thread would otherwise vanish
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 8 and len(set(results)) == 1
    assert results[0][2] == 0 and "aoti_torch_mps_mm_out" in results[0][1]


FACTORIES = {
    "exits.py": "import sys\ndef make():\n    sys.exit(3)\n",
    "exits_in_forward.py": """
import sys, torch
class Quit(torch.nn.Module):
    def forward(self, x):
        sys.exit(4)
def make():
    return Quit(), (torch.randn(2),)
""",
    "chatty.py": """
import torch
print("hello from the factory")
def make():
    print("building", flush=True)
    return torch.nn.Linear(3, 3), (torch.randn(1, 3),)
""",
    "loud.py": """
import os, sys, torch
def make():
    sys.stdout.write("x" * (4 << 20))
    os.write(1, b"native output " * 1000)
    return torch.nn.ReLU(), (torch.randn(4),)
""",
}


def test_hostile_models_end_their_own_audit_and_leave_a_valid_report(tmp_path):
    for name, body in FACTORIES.items():
        (tmp_path / name).write_text(body)
    (tmp_path / "random.pt2").write_bytes(os.urandom(4096))
    import torch
    torch.export.save(torch.export.export(torch.nn.ReLU(), (torch.randn(3),)), tmp_path / "whole.pt2")
    (tmp_path / "truncated.pt2").write_bytes((tmp_path / "whole.pt2").read_bytes()[:700])
    specs = [f"{tmp_path}/{name}:make" for name in FACTORIES] + [
        str(tmp_path / "random.pt2"), str(tmp_path / "truncated.pt2"), "seed_split_linear"]
    done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", *specs], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **CLEAN_ENV})
    document = json.loads(done.stdout)  # nothing but the report on stdout, even 4 MiB of prints
    assert done.returncode == 2 == document["exit_code"]
    status = {Path(m["name"].split(":")[0]).name: m for m in document["models"]}
    assert "called sys.exit(3)" in status["exits.py"]["failure"]["message"]
    assert status["exits_in_forward.py"]["status"] == "error"
    assert "SystemExit: 4" in status["exits_in_forward.py"]["failure"]["message"]
    assert status["chatty.py"]["status"] == status["loud.py"]["status"] == "clean"
    for broken in ("random.pt2", "truncated.pt2"):
        assert "not a loadable ExportedProgram" in status[broken]["failure"]["message"]
    assert status["seed_split_linear"]["status"] == "clean"  # the models after them still ran
    assert "building" in done.stderr and "native output" in done.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_keyboard_interrupt_raised_by_model_code_is_that_models_error(tmp_path, jobs):
    # No Ctrl-C is sent: in the auditing process (-j 1) and in a worker (-j 2) the exception is the model's.
    (tmp_path / "interrupts.py").write_text("""
import torch
class Interrupts(torch.nn.Module):
    def forward(self, x):
        raise KeyboardInterrupt("raised by the model")
def make():
    return Interrupts(), (torch.randn(2),)
""")
    done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", "--no-cache", "-j", jobs,
                           f"{tmp_path}/interrupts.py:make", "seed_split_linear"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **CLEAN_ENV},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    document = json.loads(done.stdout)
    assert done.returncode == 2 == document["exit_code"], done.stderr[-2000:]
    interrupts, seed = document["models"]
    assert interrupts["status"] == "error" and "KeyboardInterrupt: raised by the model" in interrupts["failure"]["message"]
    assert seed["status"] == "clean"


def test_ctrl_c_mid_audit_exits_130_with_a_valid_report_of_what_ran():
    # A job started in the background (CI's, say) inherits SIGINT ignored, and so would the audit:
    # give it the default disposition, as a terminal would.
    process = subprocess.Popen([SHIMKIT, "audit", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, **CLEAN_ENV},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    finished = 0
    while finished < 2:  # progress lines end when a model is done
        line = process.stderr.readline()
        assert line, "the audit ended before two models were done"
        finished += line.startswith("[") and line.rstrip().endswith(" s)")
    process.send_signal(signal.SIGINT)
    stdout, _ = process.communicate(timeout=300)
    assert process.returncode == 130
    document = json.loads(stdout)
    assert document["status"] == "interrupted" and document["exit_code"] == 130
    statuses = [m["status"] for m in document["models"]]
    assert 2 <= len(statuses) < 9 and statuses[:2] == ["clean", "clean"]
    assert set(statuses[2:]) <= {"clean", "interrupted"}


def _own_group_with_default_sigint() -> None:
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("seconds", [0.3, 1.5, 3.0, 5.0, 8.0])
def test_ctrl_c_to_the_process_group_at_any_moment_of_a_parallel_audit_leaves_a_report(seconds):
    """SIGINT to the whole process group, as a terminal sends it, spread over a `-j 2` run: while torch and
    ExecuTorch import (which left a KeyboardInterrupt traceback and no report), while workers start and while
    they audit. Whatever the moment: exit 130 with a valid report of the models done, then the one
    interrupted; or, if the run was over first, its own report and status."""
    models = ["seed_split_linear", "cumsum", "mobilenet_v3_small", "baddbmm"]
    process = subprocess.Popen([SHIMKIT, "audit", "--json", "--no-cache", "-j", "2", *models],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **CLEAN_ENV}, preexec_fn=_own_group_with_default_sigint)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    document = json.loads(stdout)  # a report, whatever the moment
    assert document["exit_code"] == process.returncode, stderr[-2000:]
    statuses = [m["status"] for m in document["models"]]
    assert [m["name"] for m in document["models"]] == models[:len(statuses)]
    if process.returncode == 130:
        assert document["status"] == "interrupted" and statuses[-1] in {"interrupted", "clean"}
        assert set(statuses[:-1]) <= {"clean"}
    else:
        assert (process.returncode, statuses) == (0, ["clean"] * len(models))
    assert "Traceback" not in stderr


EXITING_PLUGINS = {
    "exits_at_import": "import sys\nsys.exit(0)\n",
    "exits_in_op_hook": """
import sys
from shimkit.registry import hookimpl
@hookimpl
def shimkit_op_plugins():
    sys.exit(0)
""",
    "exits_in_pass_hook": """
import sys
from shimkit.registry import hookimpl
@hookimpl
def shimkit_passes():
    sys.exit(0)
""",
    "exits_in_pass_factory": """
import sys
from shimkit.registry import PassSpec, hookimpl
@hookimpl
def shimkit_passes():
    yield PassSpec(name="exits_when_built", factory=lambda capabilities: sys.exit(0), doc="exits")
""",
}


INTERRUPTING_PLUGINS = {
    "interrupts_at_import": "raise KeyboardInterrupt('raised by the plugin')\n",
    "interrupts_in_op_hook": """
from shimkit.registry import hookimpl
@hookimpl
def shimkit_op_plugins():
    raise KeyboardInterrupt("raised by the plugin")
""",
}


def test_a_keyboard_interrupt_raised_by_plugin_code_is_that_plugins_problem(tmp_path):
    """Not a Ctrl-C (none is sent): the command lists both plugins as problems and ends normally."""
    entry_points = {name.replace("_", "-"): name for name in INTERRUPTING_PLUGINS}
    install_distribution(tmp_path, "interrupting-plugins", entry_points, INTERRUPTING_PLUGINS)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([SHIMKIT, "plugins", "--json"], capture_output=True, text=True, timeout=600, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 0, done.stderr[-2000:]
    problems = {p["source"]["name"]: p for p in json.loads(done.stdout)["problems"]}
    assert {name: problems[name]["stage"] for name in entry_points} == {"interrupts-at-import": "import",
                                                                       "interrupts-in-op-hook": "hook"}
    assert all("KeyboardInterrupt: raised by the plugin" in problems[name]["message"] for name in entry_points)


def test_a_plugin_calling_sys_exit_never_ends_a_command_with_status_0(tmp_path):
    """sys.exit(0) at import, in either hook and in a pass factory: every command still prints its whole
    output, reports each plugin by name and exits as it would without them."""
    entry_points = {name.replace("_", "-"): name for name in EXITING_PLUGINS}
    install_distribution(tmp_path, "exiting-plugins", entry_points, EXITING_PLUGINS)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    commands = {"plugins --json": ["plugins", "--json"], "plugins": ["plugins"], "config mps": ["config", "mps"],
                "config cuda --cmake": ["config", "cuda", "--cmake"],
                "audit --json": ["audit", "--json", "--quiet", "--no-cache", "cumsum"]}
    for label, argv in commands.items():
        done = subprocess.run([SHIMKIT, *argv], capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0 and done.stdout.strip(), (label, done.returncode, done.stderr[-2000:])
        if label == "plugins --json":
            problems = {p["source"]["name"]: p for p in json.loads(done.stdout)["problems"]}
            assert set(problems) >= {"exits-at-import", "exits-in-op-hook", "exits-in-pass-hook"}
            assert all("SystemExit: 0" in p["message"] for p in problems.values())
        if label == "audit --json":
            assert json.loads(done.stdout)["models"][0]["status"] == "clean"
        for name in ("exits-at-import", "exits-in-op-hook", "exits-in-pass-hook"):
            assert name in done.stderr, (label, name)


class RaisingErfinv:
    @hookimpl
    def shimkit_op_plugins(self):
        def broken(x):
            raise RuntimeError("a bug in the plugin")

        yield OpPlugin(name="broken-erfinv", ops=("aten::erfinv.default",),
                       decompositions={"aten::erfinv.default": broken})


def test_a_third_party_decomposition_that_raises_leaves_its_node_and_the_rest_lowers():
    import torch

    from shimkit.passes import DecomposeInPlace, PassError
    from shimkit.passes.decompose import recording_declines

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.erfinv(x).cumsum(0)

    registry = new_registry(env=CLEAN_ENV)
    registry.register(RaisingErfinv(), name="broken-erfinv")
    program = torch.export.export(Model(), (torch.rand(6) - 0.5,))
    with recording_declines() as declines:
        DecomposeInPlace.from_capabilities(registry.backend_config("mps").capabilities)(program.graph_module)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "aten.erfinv.default" in targets and "aten.cumsum.default" not in targets  # the built-in still ran
    (decline,) = declines
    assert decline.op == "aten::erfinv" and "op plugin 'broken-erfinv' (registered from code" in decline.reason
    assert "RuntimeError: a bug in the plugin" in decline.reason
    strict = new_registry(env={**CLEAN_ENV, "SHIMKIT_STRICT_PLUGINS": "1"})
    strict.register(RaisingErfinv(), name="broken-erfinv")
    with pytest.raises(PassError, match="a bug in the plugin"):
        DecomposeInPlace.from_capabilities(strict.backend_config("mps").capabilities)(
            torch.export.export(Model(), (torch.rand(6) - 0.5,)).graph_module)
