"""docs/plugins.md's MPSGraph kernel (docs/examples/mpsgraph_plugin; issue 67, part 2): a third-party plugin whose
Kernel is Objective-C++ over Metal and MPSGraph, built and run on Linux against shimkit.objc.

* The guide's commands run as written from a user's folder: ``cp -r shimkit/docs/examples/mpsgraph_plugin ...``
  (``shimkit`` here is a link to this checkout, the reader's clone), ``cd``, then ``python -m pytest`` with the
  environment's ``python`` first on ``PATH``, as a plain user's shell (no CI, no profile of this suite's: the
  example's own pyproject loads shimkit's derandomized ``ci`` profile). shimkit builds the kernel's host module
  from its ``host_sources``, the ``.mm`` files compiled as Objective-C++. The lines the guide shows must appear.
* Installed from a wheel into a throwaway environment over this one, the guide's ``shimkit audit --execute`` of
  its ``model.py`` prints what the guide shows: the program calls the plugin's ``aoti_torch_mps_baddbmm_out``
  (``baddbmm_shim_mps.mm``, written against ExecuTorch's Metal API and compiled into the stand-in runtime as
  Objective-C++), and its numerics are clean.
* Registered in process, a program with a dynamic batch calls the same c-shim and equals eager at every checked
  size.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from test_documented_commands import (PLUGIN_GUIDE, UNSET, fenced_blocks, throwaway_environment, transcript,
                                      unmatched)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "mpsgraph_plugin"
# The example's tests: the hypothesis property, 6 edge cases in 3 dtypes, 2 refusals.
EXPECTED_TESTS = 1 + 6 * 3 + 2
TIMEOUT_S = 600


def guide_block(command: str):
    """The guide's ``text`` transcript holding ``$ command``."""
    (block,) = [b for b in fenced_blocks(PLUGIN_GUIDE) if b.lang == "text" and f"\n$ {command}\n" in f"\n{b.text}"]
    return block


def run_transcript(block, folder: Path, environment: dict[str, str]) -> None:
    """Each ``$`` line of ``block`` with bash, in order, from ``folder`` (``cd DIR`` moves the session); each must
    exit 0 and print the lines under it, in order (tests/test_documented_commands.py's matching)."""
    cwd = folder
    for command in transcript(block):
        words = shlex.split(command.text, comments=True)
        if words[0] == "cd" and len(words) == 2:
            cwd = (cwd / words[1]).resolve()
            assert cwd.is_dir(), f"{command.where}: $ {command.text}: no such folder"
            continue
        done = subprocess.run(["bash", "-c", command.text], cwd=cwd, env=environment, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        report = f"{command.where}: $ {command.text} (exit {done.returncode})\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, report
        missing = unmatched(command.expected, done.stdout)
        assert missing is None, f"the output has no line like {missing!r}\n{report}"
        yield command, done


def user_shell() -> dict[str, str]:
    """A plain user's environment, this interpreter's folder first on PATH (its ``python``)."""
    environment = {name: value for name, value in os.environ.items() if not UNSET.fullmatch(name)}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    return environment


def test_the_guides_commands_run_the_examples_tests_from_a_users_folder(tmp_path):
    (tmp_path / "shimkit").symlink_to(ROOT, target_is_directory=True)  # the reader's clone of the repository
    block = guide_block("python -m pytest")
    ran = {command.text: done for command, done in run_transcript(block, tmp_path, user_shell())}
    assert (tmp_path / "mpsgraph_plugin" / "pyproject.toml").is_file()
    output = ran["python -m pytest"].stdout
    summary = re.findall(r"^=+ (.+) in [\d.]+s(?: \([^)]*\))? =+$", output, re.M)
    assert summary, output[-3000:]
    counts = dict((kind, int(count)) for count, kind in re.findall(r"(\d+) (\w+)", summary[-1]))
    counts.pop("warnings", None)
    assert counts == {"passed": EXPECTED_TESTS}, output[-3000:]


def test_the_guides_audit_of_the_installed_example_calls_its_mpsgraph_c_shim(tmp_path):
    environment = throwaway_environment(tmp_path / "environment")
    project = tmp_path / "project"
    project.mkdir()
    (project / "shimkit").symlink_to(ROOT, target_is_directory=True)
    for command in ("cp -r shimkit/docs/examples/mpsgraph_plugin mpsgraph_plugin",
                    "pip wheel --no-build-isolation --no-deps -w dist ./mpsgraph_plugin",
                    "pip install dist/mpsgraph_baddbmm-0.1.0-*.whl"):
        done = subprocess.run(["bash", "-c", command], cwd=project, env=environment, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        assert done.returncode == 0, f"$ {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # the guide's model.py: the Python block that defines make() and calls torch.baddbmm
    (model,) = [b for b in fenced_blocks(PLUGIN_GUIDE) if b.lang == "python" and "torch.baddbmm(" in b.text
                and "def make(" in b.text]
    (project / "model.py").write_text(model.text)
    list(run_transcript(guide_block("shimkit audit --execute model.py:make"), project, environment))


MODEL = """
    import torch


    class Model(torch.nn.Module):
        def forward(self, bias, x, y):
            return torch.baddbmm(bias, x, y, beta=0.5, alpha=2.0)


    def make():
        generator = torch.Generator().manual_seed(0)
        batch = torch.export.Dim("batch", min=1, max=6)
        inputs = tuple(torch.randn(*shape, generator=generator) for shape in ((5,), (2, 3, 4), (2, 4, 5)))
        return Model(), inputs, {"bias": None, "x": {0: batch}, "y": {0: batch}}
"""


def test_a_dynamic_program_calls_the_examples_c_shim_at_every_size(tmp_path, monkeypatch):
    from shimkit.audit.loader import load_model
    from shimkit.audit.options import AuditOptions
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import new_registry

    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    from mpsgraph_baddbmm import plugin

    registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
    registry.register(plugin, name="mpsgraph_baddbmm")
    config = registry.backend_config("mps")
    assert config.provider_of("aoti_torch_mps_baddbmm_out").plugin == "mpsgraph-baddbmm"
    kernel = Path(plugin.KERNEL.directory)
    assert {str(kernel / name) for name in plugin.KERNEL.runtime_sources} <= set(config.kernel_sources)

    (tmp_path / "baddbmm_model.py").write_text(textwrap.dedent(MODEL))
    audit = audit_loaded(load_model(f"{tmp_path / 'baddbmm_model.py'}:make"), config=config,
                         options=AuditOptions(numerics="execute"))
    assert "aoti_torch_mps_baddbmm_out" in {k.name for k in audit.kernels}, audit.kernels
    assert audit.numerics is not None and audit.numerics.ran == "program", audit.numerics
    assert audit.status == "clean", (audit.failure, audit.numerics)
    # the example's batch of 2, the bounds 1 and 6 and one past the example: each equal to eager within its error
    assert len(audit.numerics.checks) > 1 and all(check.ok for check in audit.numerics.checks), audit.numerics
