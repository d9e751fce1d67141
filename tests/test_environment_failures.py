"""A machine that cannot build, load or run a program is no verdict on the program (issue 44): an unusable build
folder, a full disk or a missing compiler makes the model "could not run" (``unchecked``, exit 2) with the cause
in the message; "wrong" (exit 1) only when outputs were computed, compared and differ."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shimkit.audit.numerics as numerics_check
from shimkit.audit import run_audit, to_json
from shimkit.audit.options import Numerics
from shimkit.runtime import program
from shimkit.store import EnvironmentFailure

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))  # the console script pip installed

MODEL = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return x.exp() + 1, x.sin()

    def make():
        return Model(), (torch.randn(4, 8),)
"""


def _model(tmp_path: Path) -> str:
    path = tmp_path / "tiny_model.py"
    path.write_text(textwrap.dedent(MODEL))
    return f"{path}:make"


def _audit_cli(tmp_path: Path, build_dir: Path, *options: str) -> tuple[int, dict]:
    done = subprocess.run([SHIMKIT, "audit", "--no-cache", "--json", "--quiet", *options, _model(tmp_path)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SHIMKIT_BUILD_DIR": str(build_dir)})
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _why(model: dict) -> str:
    return (model["numerics"] or {}).get("unavailable") or (model["failure"] or {}).get("message") or ""


def test_a_build_folder_under_a_regular_file_is_could_not_run_naming_it(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    build_dir = tmp_path / "a-file" / "build"
    code, report = _audit_cli(tmp_path, build_dir, "--execute")
    model = report["models"][0]
    assert code == 2 and report["exit_code"] == 2, model
    assert model["status"] in ("unchecked", "error") and model["status"] != "wrong"
    assert str(tmp_path / "a-file") in _why(model), _why(model)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder regardless of its mode")
def test_a_read_only_build_folder_is_could_not_run_naming_it(tmp_path):
    build_dir = tmp_path / "read-only"
    build_dir.mkdir(mode=0o555)
    try:
        code, report = _audit_cli(tmp_path, build_dir, "--execute")
    finally:
        build_dir.chmod(0o700)  # so that pytest can remove it
    model = report["models"][0]
    assert code == 2 and report["exit_code"] == 2, model
    assert str(build_dir) in _why(model), _why(model)


def _run(tmp_path: Path, check_numerics: bool | str) -> tuple[int, dict]:
    result = run_audit([_model(tmp_path)], plugins=False, check_numerics=check_numerics)
    document = to_json(result)
    return document["exit_code"], document["models"][0]


@pytest.mark.parametrize("failure", [
    EnvironmentFailure("the build folder '/nowhere' cannot be used: Permission denied"),
    OSError(errno.ENOSPC, "No space left on device", "/nowhere/library.so"),
    FileNotFoundError(errno.ENOENT, "No such file or directory", "c++"),
], ids=["environment-failure", "disk-full", "no-compiler"])
def test_a_program_that_cannot_be_built_here_is_unchecked_never_wrong(tmp_path, monkeypatch, failure):
    def cannot_build(self, *args, **kwargs):
        raise failure

    monkeypatch.setattr(program.MetalProgram, "__init__", cannot_build)
    code, model = _run(tmp_path, Numerics.EXECUTE)
    assert (code, model["status"]) == (2, "unchecked"), model
    assert "could not build or run" in _why(model) and str(failure) in _why(model), _why(model)


def test_any_other_failure_to_build_the_program_is_unchecked(tmp_path, monkeypatch):
    def cannot_build(self, *args, **kwargs):
        raise ValueError("adapter path '/x\"y/adapter.mm' cannot be #include-d (quote, backslash or line break)")

    monkeypatch.setattr(program.MetalProgram, "__init__", cannot_build)
    code, model = _run(tmp_path, Numerics.EXECUTE)
    assert (code, model["status"]) == (2, "unchecked"), model
    assert "cannot be #include-d" in _why(model)


def test_an_environment_failure_while_a_stand_in_runs_is_unchecked(tmp_path, monkeypatch):
    """Any stand-in (the CPU copy here, AOTInductor's package for CUDA) that meets the machine's failure as it
    runs: the numbers were never computed."""
    def failing_copy(module, real_value):
        def run(*operands):
            raise OSError(errno.EROFS, "Read-only file system", "/nowhere/inputs.pt")
        return run

    monkeypatch.setattr(numerics_check, "cpu_copy", failing_copy)
    code, model = _run(tmp_path, True)
    assert (code, model["status"]) == (2, "unchecked"), model
    assert "/nowhere/inputs.pt" in _why(model)


def test_a_wrong_result_is_still_wrong_with_exit_1(tmp_path, monkeypatch):
    original = program.MetalProgram.__call__

    def second_output_off(self, *inputs):
        outputs = original(self, *inputs)
        return [outputs[0], outputs[1] + 0.5]

    monkeypatch.setattr(program.MetalProgram, "__call__", second_output_off)
    code, model = _run(tmp_path, Numerics.EXECUTE)
    assert (code, model["status"]) == (1, "wrong"), model
    assert "output 1" in model["numerics"]["checks"][0]["error"]


def test_a_stand_in_that_fails_on_its_operands_is_still_wrong(tmp_path, monkeypatch):
    """A program that raises while it computes (not for the machine's sake) is a verdict: "wrong"."""
    def refusing_copy(module, real_value):
        def run(*operands):
            raise RuntimeError("the kernel refused its operands")
        return run

    monkeypatch.setattr(numerics_check, "cpu_copy", refusing_copy)
    code, model = _run(tmp_path, True)
    assert (code, model["status"]) == (1, "wrong"), model
    assert "refused its operands" in model["numerics"]["checks"][0]["error"]


def test_a_run_this_machine_could_not_finish_is_not_cached(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for _ in range(2):
        done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", "--execute", *cache, _model(tmp_path)],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "SHIMKIT_BUILD_DIR": str(tmp_path / "a-file" / "build")})
        model = json.loads(done.stdout)["models"][0]
        assert done.returncode == 2 and model["cached"] is False, model
    assert not list((tmp_path / "cache").rglob("entry.json"))
