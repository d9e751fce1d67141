"""Model-provided names never become code (issue 44, docs/audit.md "What the audit trusts").

torch.fx pastes parameter names unescaped into the Python it generates for ``ExportedProgram.module()``, and
AOTInductor into ``constants_info_[i].original_fqn = "<name>";`` in its C++ wrapper. The payloads below are
parameter names that run ``touch`` through each: in Python (``--check-numerics`` runs ``.module()``), in a
Python/C++ polyglot ending a C++ raw string, and in C++ through a ``\\`` line splice that carries a ``//``
comment over the name's second line. ``torch.export.load`` itself turns a graph input's name into Python and
``eval``\\ s symbolic sizes, and ``.module()`` ``exec``\\ s shape guards: those are refused as the file loads.
Every audit of such a program is "could not run" (exit 2), naming the name escaped; no marker file appears.
"""

from __future__ import annotations

import json
import string
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import shimkit.audit.names as names
from shimkit.audit import run_audit, to_json
from shimkit.audit.loader import ModelLoadError, load_model
from shimkit.audit.names import (UnsafeExpression, UnsafeGuard, UnsafeName, check_guard, check_name, check_program,
                                 check_sympy_expression, is_safe_name)

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))  # the console script pip installed

# Each creates its marker (a file of that name in the working directory) when its code runs.
PAYLOADS = {
    "python": ('w", [getattr(__import__("os"), "system")("touch python-ran"), '
               '*getattr(self, "parameters")()][1]) #'),
    "polyglot": ('a" R"q(", next(iter(getattr(self, "parameters")()))) # )q"; system("touch polyglot-ran"); '
                 'const char* zz = "'),
    "splice": ('a" R"q(", next(iter(getattr(self, "parameters")())) # )q"; system("touch splice-ran"); // \\\n'
               'if 1 else "'),
}
MARKERS = {kind: f"{kind}-ran" for kind in PAYLOADS}


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return torch.relu(x @ self.w)


def _renamed(program: torch.export.ExportedProgram, old: str, new: str) -> torch.export.ExportedProgram:
    """``program`` with its parameter ``old`` called ``new`` (register_parameter refuses only ``.``)."""
    program.state_dict[new] = program.state_dict.pop(old)
    for spec in program.graph_signature.input_specs:
        if spec.target == old:
            spec.target = new
    return program


def _saved(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.pt2"
    torch.export.save(_renamed(torch.export.export(Tiny(), (torch.randn(2, 4),)), "w", PAYLOADS[kind]), path)
    return path


def _edited(source: Path, target: Path, edit: Callable[[str], str]) -> Path:
    """``source`` with ``edit`` applied to the text of its serialized program (``models/*.json``)."""
    with zipfile.ZipFile(source) as reading, zipfile.ZipFile(target, "w") as writing:
        for info in reading.infolist():
            data = reading.read(info.filename)
            if "/models/" in info.filename and info.filename.endswith(".json"):
                data = edit(data.decode()).encode()
            writing.writestr(info, data)
    return target


def _no_markers(folder: Path) -> None:
    ran = sorted(path.name for path in folder.iterdir() if path.name.endswith("-ran"))
    assert not ran, f"a payload ran: {ran}"


@pytest.mark.parametrize("options", [[], ["--check-numerics"], ["--execute"]],
                         ids=["audit", "check-numerics", "execute"])
def test_a_pt2_whose_parameter_name_is_code_could_not_run_and_runs_nothing(tmp_path, options):
    files = [str(_saved(tmp_path, kind)) for kind in PAYLOADS]
    done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", "--cache-dir", str(tmp_path / "cache"),
                           "-j", "1", *options, *files],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    report = json.loads(done.stdout)
    for kind, model in zip(PAYLOADS, report["models"]):
        assert (model["status"], model["failure"]["phase"]) == ("error", "load"), model
        message = model["failure"]["message"]
        assert ascii(PAYLOADS[kind]) in message and "parameter" in message, message
    _no_markers(tmp_path)


def test_the_python_payload_runs_without_the_check(tmp_path, monkeypatch):
    """The fixture is live: with the names unchecked, --check-numerics runs the code (the report says WRONG)."""
    import contextlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(names, "check_program", lambda *args: None)
    monkeypatch.setattr(names, "checked_loading", lambda where: contextlib.nullcontext())
    run_audit([str(_saved(tmp_path, "python"))], plugins=False, check_numerics=True)
    assert (tmp_path / MARKERS["python"]).exists()


def test_a_python_model_whose_parameter_name_is_code_could_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "named.py").write_text(
        "import torch\n\n"
        "class Named(torch.nn.Module):\n"
        "    def __init__(self, name):\n"
        "        super().__init__()\n"
        "        self.register_parameter(name, torch.nn.Parameter(torch.randn(4, 4)))\n\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x @ next(iter(self.parameters())))\n\n"
        f"def make():\n    return Named({PAYLOADS['python']!r}), (torch.randn(2, 4),)\n")
    document = to_json(run_audit([str(tmp_path / "named.py") + ":make"], plugins=False, check_numerics=True))
    (model,) = document["models"]
    assert document["exit_code"] == 2 and (model["status"], model["failure"]["phase"]) == ("error", "export")
    assert ascii(PAYLOADS["python"]) in model["failure"]["message"]
    _no_markers(tmp_path)


def _dynamic_program() -> torch.export.ExportedProgram:
    """A program with symbolic sizes and shape guards, as torch writes them."""
    class Halves(torch.nn.Module):
        def forward(self, x, y):
            return (x.reshape(-1, 2) * 2).sum(0) + y[: x.shape[0] // 2].sum()

    half = torch.export.Dim("half", min=2, max=30)
    return torch.export.export(Halves(), (torch.randn(8), torch.randn(10)),
                               dynamic_shapes=({0: 2 * half}, {0: torch.export.Dim("y", min=4)}))


def test_a_program_as_torch_writes_it_passes_and_loads(tmp_path):
    program = _dynamic_program()
    assert program._guards_code  # the guards torch writes are accepted
    check_program(program, "halves")
    torch.export.save(program, tmp_path / "halves.pt2")
    loaded = load_model(str(tmp_path / "halves.pt2"))  # its symbolic sizes are accepted as they load
    assert loaded.exported is not None and loaded.exported._guards_code == program._guards_code


def test_a_graph_input_named_as_code_is_refused_before_torch_generates_it(tmp_path):
    """``torch.export.load`` pastes a graph input's name into ``def forward(self, <name>)`` and ``exec``\\ s it."""
    marker = tmp_path / "input-ran"
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(Tiny(), (torch.randn(2, 4),)), clean)
    evil = f'a=__import__("os").system("touch {marker}")'

    def rename(text: str) -> str:
        return text.replace(json.dumps("p_w"), json.dumps(evil)).replace(json.dumps("x"), json.dumps("x=0"))

    with pytest.raises(ModelLoadError) as raised:
        load_model(str(_edited(clean, tmp_path / "input.pt2", rename)))
    assert ascii(evil) in str(raised.value)
    assert not marker.exists()


def test_a_symbolic_size_that_is_code_is_refused_before_sympy_evaluates_it(tmp_path):
    marker = tmp_path / "sympy-ran"
    clean = tmp_path / "dynamic.pt2"
    torch.export.save(_dynamic_program(), clean)
    evil = f"positive=__import__('os').system('touch {marker}')==0"

    def inject(text: str) -> str:
        assert "positive=True" in text
        return text.replace("positive=True", evil, 1)

    with pytest.raises(ModelLoadError, match="symbolic size"):
        load_model(str(_edited(clean, tmp_path / "sympy.pt2", inject)))
    assert not marker.exists()


def test_a_guard_that_is_code_is_refused(tmp_path):
    marker = tmp_path / "guard-ran"
    program = torch.export.export(Tiny(), (torch.randn(2, 4),))
    program._guards_code = [f"__import__('os').system('touch {marker}') == 0"]
    torch.export.save(program, tmp_path / "guard.pt2")
    with pytest.raises(ModelLoadError, match="shape guard"):
        load_model(str(tmp_path / "guard.pt2"))
    assert not marker.exists()


@pytest.mark.parametrize("guard", [
    "L['x'].size()[0] == 2",
    "(L['x'].size()[0] // 2) <= L['y'].size()[0] and L['x'].stride()[0] == 1",
    "math.floor(L['x'].size()[0] / 3) >= 1",
])
def test_guards_on_sizes_are_accepted(guard):
    check_guard(guard, "m.pt2")


@pytest.mark.parametrize("guard", [
    "__import__('os').system('x') == 0",
    "L['x'].size()[0] == 2 # a comment",
    "L['x'].__class__ == 1",
    "L['x'].size()[0] == len('a')",
    "L[\"a'b\"].size()[0] == 2",
    "torch.load('f') == 1",
    "L['x'].size()[0] == 2\nimport os",
    "(lambda: 1)() == 1",
])
def test_guards_that_are_not_conditions_on_sizes_are_refused(guard):
    with pytest.raises(UnsafeGuard):
        check_guard(guard, "m.pt2")


@pytest.mark.parametrize("text", [
    "Mul(Integer(2), Symbol('s0', positive=True, integer=True))",
    "Float('1.5', precision=53)",
    "Max(Integer(-2), FloorDiv(Symbol('s1', integer=True), Integer(2)))",
])
def test_symbolic_sizes_as_srepr_writes_them_are_accepted(text):
    from torch.utils._sympy.functions import FloorDiv

    check_sympy_expression(text, {"FloorDiv": FloorDiv}, "m.pt2")


@pytest.mark.parametrize("text", [
    "S('__import__(\"os\")')",  # sympy's own sympify, under another name
    "sympify('1')",
    "floor('__import__(\"os\").getcwd()')",  # a function sympy sympifies its string argument with
    "Symbol('a(1)')",
    "Integer(2).__class__",
    "lambdify(Integer(1), Integer(2))",
    "s0 if True else s1",
])
def test_symbolic_sizes_that_could_run_code_are_refused(text):
    with pytest.raises(UnsafeExpression):
        check_sympy_expression(text, {}, "m.pt2")


def test_a_compiled_aotinductor_package_in_the_archive_is_refused_before_loading(tmp_path):
    """``torch.export.load`` dlopens the shared library of a package under ``data/aotinductor/``."""
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(Tiny(), (torch.randn(2, 4),)), clean)
    crafted = tmp_path / "package.pt2"
    with zipfile.ZipFile(clean) as reading, zipfile.ZipFile(crafted, "w") as writing:
        for info in reading.infolist():
            writing.writestr(info, reading.read(info.filename))
        prefix = reading.namelist()[0].split("/")[0]
        writing.writestr(f"{prefix}/data/aotinductor/model/model.wrapper.so", b"\x7fELF")
    with pytest.raises(ModelLoadError, match="AOTInductor package"):
        load_model(str(crafted))


def test_forward_and_keyword_argument_names_are_checked():
    class Keyword(torch.nn.Module):
        def forward(self, x, *, scale):
            return x * scale

    program = torch.export.export(Keyword(), (torch.randn(3),), {"scale": torch.randn(3)})
    check_program(program, "keyword")
    signature = program.module_call_graph[0].signature
    signature.forward_arg_names = ["x", "scale=__import__('os')"]
    with pytest.raises(UnsafeName, match="forward argument"):
        check_program(program, "keyword")


IDENTIFIER_CHARACTERS = string.ascii_letters + string.digits + "_"
segments = st.text(alphabet=IDENTIFIER_CHARACTERS, min_size=1, max_size=12)
dotted_names = st.lists(segments, min_size=1, max_size=5).map(".".join)


@given(dotted_names)
def test_every_dotted_name_of_identifier_characters_is_accepted(name):
    assert is_safe_name(name)
    check_name(name, "parameter name", "m.pt2")


@given(dotted_names, st.characters().filter(lambda c: c not in IDENTIFIER_CHARACTERS + "."), st.data())
def test_a_name_with_any_other_character_is_refused_and_shown_escaped(name, other, data):
    at = data.draw(st.integers(0, len(name)))
    unsafe = name[:at] + other + name[at:]
    with pytest.raises(UnsafeName) as raised:
        check_name(unsafe, "parameter name", "m.pt2")
    message = str(raised.value)
    assert ascii(unsafe) in message and "parameter name" in message
    assert message.isascii()


@given(dotted_names, st.sampled_from(["{}.", ".{}", "{}..{}"]))
def test_an_empty_segment_is_refused(name, shape):
    with pytest.raises(UnsafeName):
        check_name(shape.format(name, name), "buffer name", "m.pt2")


@pytest.mark.parametrize("name", ["", ".", "é", "a\nb", "a\\", 3, None])
def test_names_outside_the_grammar_are_refused(name):
    assert not is_safe_name(name)


def test_a_single_segment_name_refuses_dots():
    assert is_safe_name("layers.0.weight") and not is_safe_name("layers.0", dotted=False)
