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

import contextlib
import json
import re
import string
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import shimkit.audit.names as names
from shimkit.audit import run_audit, to_json
from shimkit.audit.loader import LoadedModel, ModelLoadError, load_model
from shimkit.audit.names import (UnsafeExpression, UnsafeGuard, UnsafeName, check_guard, check_name, check_program,
                                 check_sympy_expression, is_safe_name, make_pasteable, stand_in)
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import AuditRun, Failure, ModelAudit, audit_loaded
from shimkit.backend import get_registry

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


def test_a_pt2_whose_parameter_names_are_code_is_renamed_executes_clean_and_runs_nothing(tmp_path):
    """--execute generates the C++ wrapper (where AOTInductor pastes constant names), compiles and runs it, and runs
    each ``.pt2``'s ``.module()`` as eager (where torch.fx pastes them): every place a payload could run."""
    files = [str(_saved(tmp_path, kind)) for kind in PAYLOADS]
    done = subprocess.run([SHIMKIT, "audit", "--json", "--quiet", "--cache-dir", str(tmp_path / "cache"),
                           "-j", "1", "--execute", *files],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    for kind, model in zip(PAYLOADS, report["models"]):
        assert model["status"] == "clean" and model["numerics"]["ran"] == "program", model
        assert all(check["ok"] for check in model["numerics"]["checks"]) and model["numerics"]["checks"]
        (renamed,) = model["renamed"]
        assert renamed["segment"] == PAYLOADS[kind] and is_safe_name(renamed["as"], dotted=False)
        assert {(name["kind"], name["name"]) for name in renamed["names"]} == {("parameter", PAYLOADS[kind])}
    _no_markers(tmp_path)


def test_every_payload_runs_without_the_renaming(tmp_path, monkeypatch):
    """The fixtures are live: with the names left as they are, --execute runs the Python payload in ``.module()``
    and the two C++ payloads in the compiled wrapper."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(names, "make_pasteable", lambda exported, where: names.Renaming())
    run_audit([str(_saved(tmp_path, kind)) for kind in PAYLOADS], numerics="execute")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.endswith("-ran")) == sorted(MARKERS.values())


def test_a_python_model_whose_parameter_name_is_code_is_renamed_and_runs_nothing(tmp_path, monkeypatch):
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
    assert document["exit_code"] == 0 and model["status"] == "clean", model
    assert [r["segment"] for r in model["renamed"]] == [PAYLOADS["python"]]
    _no_markers(tmp_path)


class _Block(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.proj = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU())

    def forward(self, x):
        return self.proj(x) + x


# torchvision's RegNet names its blocks as AnyStage does (``block1-0``); ``add_module`` takes the rest as well.
REGNET_STYLE_NAMES = ("block1-0", "block with a space", "blöck", 'quote"d', "back\\slash")


class RegNetStyle(torch.nn.Module):
    """``trunk_output.block1.block1-0.proj.0.weight`` and its kin, as ``regnet_y_400mf``'s state dict spells them."""

    def __init__(self) -> None:
        super().__init__()
        stage = torch.nn.Sequential()
        for name in REGNET_STYLE_NAMES:
            stage.add_module(name, _Block(4))
        self.trunk_output = torch.nn.Sequential()
        self.trunk_output.add_module("block1", stage)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.trunk_output(x).mean((2, 3)))


@pytest.mark.parametrize("numerics", ["check", "execute"])
def test_regnet_style_names_lower_clean_and_compute_right(numerics):
    from shimkit.audit.report import render_model

    torch.manual_seed(0)
    loaded = LoadedModel("regnet_style", model=RegNetStyle(), example_inputs=(torch.randn(1, 4, 8, 8),))
    audit = audit_loaded(loaded, config=get_registry().backend_config("mps"), options=AuditOptions(numerics=numerics))
    assert audit.status == "clean", audit.failure or audit.numerics
    assert audit.numerics.ran == ("program" if numerics == "execute" else "graph") and audit.numerics.checks
    model = to_json(AuditRun([audit], True, get_registry(), None))["models"][0]
    assert {r["segment"] for r in model["renamed"]} == set(REGNET_STYLE_NAMES)
    weights = {n["name"]: n["as"] for r in model["renamed"] for n in r["names"] if n["kind"] == "parameter"}
    assert len(weights) == 2 * len(REGNET_STYLE_NAMES)  # each block's convolution weight and bias
    assert weights["trunk_output.block1.block1-0.proj.0.weight"] == (
        f"trunk_output.block1.{stand_in('block1-0')}.proj.0.weight")
    assert all(is_safe_name(stand) for stand in weights.values())
    assert "renamed 'block1-0' as block1_0_u" in render_model(model)


def test_findings_are_reported_under_the_models_own_names():
    exported = torch.export.export(RegNetStyle(), (torch.randn(1, 4, 8, 8),))
    renaming = make_pasteable(exported, "regnet_style")
    conv = next(name for name in exported.state_dict if name.endswith("proj.0.weight"))
    audit = ModelAudit("regnet_style", plugins=True, renaming=renaming,
                       failure=Failure("error", "inductor", f"RuntimeError: no kernel for {conv} at p_{conv}"))
    message = to_json(AuditRun([audit], True, get_registry(), None))["models"][0]["failure"]["message"]
    original = "trunk_output.block1.block1-0.proj.0.weight"
    assert message == f"RuntimeError: no kernel for {original} at p_{original}"


def test_a_non_ascii_forward_argument_is_renamed_and_the_program_still_runs():
    class Accented(torch.nn.Module):
        def forward(self, é, y):
            return é * 2 + y

    inputs = (torch.randn(3), torch.randn(3))
    exported = torch.export.export(Accented(), inputs)
    renaming = make_pasteable(exported, "accented")
    assert [(r.kind, r.name) for r in renaming.renamed] == [("forward argument", "é")]
    assert exported.module_call_graph[0].signature.forward_arg_names == [stand_in("é"), "y"]
    torch.testing.assert_close(exported.module()(*inputs), Accented()(*inputs))


def test_a_keyword_argument_whose_name_is_not_safe_is_refused():
    """A caller passes a keyword by its name: no stand-in can replace it."""
    class Keywords(torch.nn.Module):
        def forward(self, x, **scales):
            return x * scales["é"]

    exported = torch.export.export(Keywords(), (torch.randn(3),), {"é": torch.randn(3)})
    with pytest.raises(UnsafeName, match=re.escape(f"argument {ascii('é')}")):
        make_pasteable(exported, "keywords")


def test_stand_ins_are_unique_even_where_names_read_alike():
    class Alike(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name in ("a-b", "a b", "a_b", f"a_b_u{stand_in('a-b')[-8:]}"):
                self.register_parameter(name, torch.nn.Parameter(torch.randn(2)))

        def forward(self, x):
            return x + sum(self.parameters())

    model = Alike()
    exported = torch.export.export(model, (torch.randn(2),))
    renaming = make_pasteable(exported, "alike")
    names_now = list(exported.state_dict)
    assert len(set(names_now)) == 4 and all(is_safe_name(name) for name in names_now)
    assert renaming.segments["a-b"] == stand_in("a-b", 16)  # its 8-digit stand-in is a name the model already has
    assert renaming.segments["a b"] == stand_in("a b")
    inputs = (torch.randn(2),)
    torch.testing.assert_close(exported.module()(*inputs), model(*inputs))


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


# Any name add_module takes: all of Unicode but ``.`` (surrogates aside: they are not text), and the payloads.
module_names = st.one_of(st.text(st.characters(blacklist_characters="."), min_size=1, max_size=16),
                         st.sampled_from(sorted(PAYLOADS.values())))


def _named_modules(names_drawn: list[str]) -> torch.nn.Sequential:
    model = torch.nn.Sequential()
    for name in names_drawn:
        try:
            model.add_module(name, torch.nn.Linear(3, 3))
        except KeyError:  # a name of one of Sequential's own attributes
            assume(False)
    return model


@given(st.lists(module_names, min_size=1, max_size=3, unique=True))
def test_any_module_names_are_renamed_consistently_and_the_program_runs_nothing_else(names_drawn):
    """``.module()`` pastes every parameter name into the Python it ``exec``\\ s: with the stand-ins, it computes
    what the model computes and no payload's marker appears."""
    import tempfile

    model = _named_modules(names_drawn)
    inputs = (torch.randn(2, 3),)
    exported = torch.export.export(model, inputs)
    renaming = make_pasteable(exported, "drawn")
    check_program(exported, "drawn")  # nothing unsafe is left
    assert set(renaming.segments) == {name for name in names_drawn if not is_safe_name(name, dotted=False)}
    assert {r.name for r in renaming.renamed if r.kind == "parameter"} == {
        f"{name}.{kind}" for name in renaming.segments for kind in ("weight", "bias")}
    again = torch.export.export(model, inputs)
    make_pasteable(again, "drawn")
    assert list(again.state_dict) == list(exported.state_dict)  # the same stand-ins in every run
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        torch.testing.assert_close(exported.module()(*inputs), model(*inputs))
        _no_markers(Path(folder))


@settings(max_examples=4)
@given(st.lists(module_names, min_size=1, max_size=2, unique=True))
def test_the_audit_of_any_module_names_is_never_refused(names_drawn):
    """The whole lowering, its numerics checked. (Not through a ``.pt2``: torch's own serializer cannot read back
    a module stack holding ``,`` or ``;``.)"""
    model = _named_modules(names_drawn)
    loaded = LoadedModel("drawn", model=model, example_inputs=(torch.randn(2, 3),))
    audit = audit_loaded(loaded, config=get_registry().backend_config("mps"), options=AuditOptions(numerics="check"))
    assert audit.status == "clean", audit.failure or audit.numerics
    assert set(audit.renaming.segments) == {n for n in names_drawn if not is_safe_name(n, dotted=False)}
