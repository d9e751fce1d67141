"""Every command and example in README.md, docs/plugins.md and docs/testing.md works as written in a user's own
project and prints what the docs say (issue 48, part 1).

The docs are read here, not copied: the fenced blocks are parsed, so a changed doc is a changed test.

* ``console`` blocks are transcripts: each ``$ COMMAND`` runs with bash from a temporary folder (a bare
  ``cd DIR`` moves the session), and the lines under it must appear in its standard output in that order
  (runs of spaces are one, ``...`` stands for any text, and a number like ``4.8e-07`` for any number); the
  exit status must be 0, or 1 where the output shown is a model's MISSING verdict (README: "1 kernels
  missing"). docs/plugins.md's walkthrough is the whole of it: the files the guide tells a plugin author to
  write (each block led by its path, the empty ones from the tree) are written into the folder, then built
  with ``pip wheel``, installed, listed, tested with plain ``pytest`` and audited. The commands run in a
  throwaway virtual environment layered over this one (a ``.pth`` file adds this environment's
  site-packages), whose ``pip``, ``shimkit``, ``pytest`` and ``python`` come first on ``PATH``: ``pip
  install`` lands there and nowhere else, and ``PIP_NO_INDEX`` keeps every command offline. Commands other
  than ``pip`` only read, so those that follow the last ``pip`` run side by side.
* ``python`` blocks that define a ``test_`` function are users' test files: they run from a temporary folder
  with plain ``python -m pytest`` (no hypothesis profile, no ``CI``: shimkit's pytest plugin must make them
  pass as they are) and must pass. Other blocks that name nothing they do not define run as scripts (a
  trailing ``# NAME == VALUE`` comment is checked); the rest are fragments (``exported``, ``edge_program``:
  the reader's own objects): they must parse, and their imports must import.
* ``bash`` blocks are commands for this repository or for the reader's own models and machines; each must be
  named in ``NOT_RUN`` with the reason, so none is left out silently.

Inner runs behave as a plain user's (random hypothesis examples, hypothesis' default settings), except that
when this suite runs derandomized (its ``ci`` profile) they get a fixed ``--hypothesis-seed``.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/plugins.md", "docs/testing.md")
PLUGIN_GUIDE = "docs/plugins.md"
TIMEOUT_S = 600
# Bash blocks not run here, by their first line: what each needs that a test cannot have.
NOT_RUN = {
    "./dev audit   # set up .venv if needed, then audit Metal lowering of the bundled model zoo":
        "this repository's own set-up and zoo audit (minutes); CI runs both itself (.ci/run)",
    "shimkit audit -j 2 --timeout 600 my_models.py:resnet my_models.py:vit":
        "the reader's own models and an installed transformers, minutes of audits; the options are "
        "tests/test_audit_workers.py's, tests/test_merge_command.py's and tests/test_audit_suites.py's",
}
# Variables of this test run that a user's shell does not have: CI and the suite's profile (the inner runs are
# a plain user's), plugin selection, interpreter and pip settings. Kept: the suite's private audit cache and
# build store (tests/conftest.py).
UNSET = re.compile(r"CI|SHIMKIT_HYPOTHESIS_PROFILE|SHIMKIT_(BLOCK|ALLOW|STRICT)_PLUGINS|SHIMKIT_DISABLE_PLUGIN_AUTOLOAD"
                   r"|PYTHON(PATH|HOME|STARTUP)|VIRTUAL_ENV|PIP_.*|PYTEST_.*|HYPOTHESIS_.*|COV_CORE_.*")


# -- the docs --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence
    lang: str
    text: str
    lead: str  # the last non-blank line before the fence

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(doc: str) -> list[Block]:
    lines = (ROOT / doc).read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        fence = re.match(r"^(```+)\s*([\w+-]*)", lines[index])
        if not fence:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith(fence.group(1)))
        lead = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        blocks.append(Block(doc, index + 1, fence.group(2), "\n".join(lines[index + 1:end]) + "\n", lead.strip()))
        index = end + 1
    return blocks


@dataclass(frozen=True)
class Command:
    where: str
    text: str
    expected: tuple[str, ...]
    exit_status: int | None = None

    @property
    def status(self) -> int:
        """0, or 1 where the output shown is a model's MISSING verdict (README: exit status 1, kernels missing)."""
        if self.exit_status is not None:
            return self.exit_status
        return 1 if any(re.search(r"^\S+: MISSING$", line) for line in self.expected) else 0


def transcript(block: Block) -> list[Command]:
    commands: list[tuple[int, str, list[str]]] = []
    for offset, line in enumerate(block.text.splitlines(), start=1):
        if line.startswith("$ "):
            commands.append((block.line + offset, line[2:].strip(), []))
        elif line.strip():
            assert commands, f"{block.where}: output before the first '$ ' command"
            commands[-1][2].append(line)
    return [Command(f"{block.doc}:{line}", text, tuple(expected)) for line, text, expected in commands]


def guide_commands() -> list[Command]:
    """docs/plugins.md's transcripts, in the order a reader runs them."""
    blocks = [block for block in fenced_blocks(PLUGIN_GUIDE) if block.lang == "console"]
    return [command for block in blocks for command in transcript(block)]


def plugin_package(blocks: list[Block]) -> tuple[str, dict[str, str]]:
    """The folder the guide's tree names and its files: each block led by a line "`PATH`:", plus the files the tree
    marks ``(empty)``. Every file of the tree must be written and no block may write one the tree lacks."""
    (tree,) = [b for b in blocks if not b.lang and re.fullmatch(r"[\w.-]+/", b.text.splitlines()[0])]
    root, *entries = tree.text.splitlines()
    listed = {}
    for entry in entries:
        path, _, note = entry.strip().partition("  ")
        listed[path] = note.strip()
    files = {}
    for block in blocks:
        named = re.fullmatch(r"`([\w./-]+)`:", block.lead)
        if named:
            files[named.group(1)] = block.text
    files.update({path: "" for path, note in listed.items() if note == "(empty)"})
    assert set(files) == set(listed), (f"{tree.where}: the tree lists {sorted(listed)}, the guide writes "
                                       f"{sorted(files)}")
    return root.rstrip("/"), files


def free_names(source: str) -> set[str]:
    """Names a block reads but neither imports, assigns, defines nor gets from builtins."""
    tree = ast.parse(source)
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound


def python_examples() -> dict[str, list[Block]]:
    """README's and docs/testing.md's Python blocks, and the guide's that are not files of the package:
    ``tests`` (a ``test_`` function), ``scripts`` (self-contained) and ``fragments``."""
    kinds: dict[str, list[Block]] = {"tests": [], "scripts": [], "fragments": []}
    for doc in DOCS:
        for block in fenced_blocks(doc):
            if block.lang != "python" or (doc == PLUGIN_GUIDE and re.fullmatch(r"`[\w./-]+`:", block.lead)):
                continue
            tree = ast.parse(block.text)  # a block that does not parse fails collection, naming it
            if any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_") for node in tree.body):
                kinds["tests"].append(block)
            else:
                kinds["scripts" if not free_names(block.text) else "fragments"].append(block)
    return kinds


def _checked_script(block: Block) -> str:
    """The script, then a check of each trailing ``# NAME == VALUE`` comment (``x == [2.5, 2.5]``)."""
    checks = []
    for line in block.text.splitlines():
        claim = re.search(r"#\s*([A-Za-z_]\w*)\s*==\s*(.+?)\s*$", line)
        if claim:
            name, value = claim.groups()
            checks.append(f"_value = {name}.tolist() if hasattr({name}, 'tolist') else {name}\n"
                          f"assert _value == {value}, f'{name} is {{_value!r}}, the doc says {value}'\n")
    return block.text + "".join(checks)


def _imports(block: Block) -> str:
    tree = ast.parse(block.text)
    return "".join(ast.get_source_segment(block.text, node) + "\n" for node in ast.walk(tree)
                   if isinstance(node, (ast.Import, ast.ImportFrom)))


# -- matching output -------------------------------------------------------------------------------------------

NUMBER = r"\d+(?:\.\d+)?e[-+]?\d+"


def line_pattern(expected: str) -> re.Pattern[str]:
    """``expected`` as a regular expression: spaces are any run of spaces, ``...`` any text, a number in
    scientific notation any number; it matches a whole word run of the output line."""
    parts = []
    for token in re.split(rf"(\.\.\.|\s+|{NUMBER})", expected.strip()):
        if token == "...":
            parts.append(".*?")
        elif token.isspace():
            parts.append(r"\s+")
        elif re.fullmatch(NUMBER, token):
            parts.append(r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan|inf)")
        elif token:
            parts.append(re.escape(token))
    return re.compile(r"(?<!\S)" + "".join(parts) + r"(?!\S)")


def unmatched(expected: tuple[str, ...], output: str) -> str | None:
    """The first expected line not found, in order, among the output's lines (None: all found)."""
    lines, at = output.splitlines(), 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = line_pattern(want)
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


# -- running ---------------------------------------------------------------------------------------------------


@dataclass
class Result:
    command: str
    cwd: Path
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"$ {self.command}   (in {self.cwd}, exit status {self.returncode})\n--- stdout ---\n"
                f"{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


def user_environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not UNSET.fullmatch(k)}
    addopts = "-p no:cacheprovider"
    try:
        from hypothesis import settings

        if settings.default.derandomize:  # this suite runs derandomized: so do the inner runs
            addopts += " --hypothesis-seed=0"
    except ImportError:
        pass
    environment["PYTEST_ADDOPTS"] = addopts
    return environment


def throwaway_environment(folder: Path) -> dict[str, str]:
    """A virtual environment over this one: its site-packages first, then this environment's (a ``.pth``
    file), and this environment's ``pip``, ``shimkit`` and ``pytest`` run by its interpreter."""
    venv.EnvBuilder(symlinks=os.name != "nt", with_pip=False).create(folder)
    paths = {"base": str(folder), "platbase": str(folder)}
    site = Path(sysconfig.get_path("purelib", vars=paths))
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "_shimkit_underlying_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in ours))
    scripts = Path(sysconfig.get_path("scripts", vars=paths))
    python = scripts / "python"
    for name, module in (("pip", "pip"), ("shimkit", "shimkit"), ("pytest", "pytest")):
        installed = Path(sysconfig.get_path("scripts")) / name
        body = (installed.read_text().split("\n", 1)[1] if installed.is_file()
                and installed.read_text().startswith("#!") else None)
        script = scripts / name
        script.write_text(f"#!{python}\n{body}" if body is not None
                          else f"#!/bin/sh\nexec '{python}' -m {module} \"$@\"\n")
        script.chmod(0o755)
    environment = user_environment()
    environment.update(PATH=f"{scripts}{os.pathsep}{environment.get('PATH', '')}", VIRTUAL_ENV=str(folder),
                       PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return environment


def run(command: str, cwd: Path, environment: dict[str, str]) -> Result:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    return Result(command, cwd, done.returncode, done.stdout, done.stderr)


def run_session(commands: list[Command], folder: Path, environment: dict[str, str]) -> dict[Command, Result]:
    """The commands in order from ``folder``; ``cd DIR`` moves the session, ``pip`` changes the environment
    (everything before it finishes first); the other commands only read and run side by side."""
    results: dict[Command, Result] = {}
    cwd, reads = folder, []

    def finish_reads():
        with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
            for (command, where), result in zip(reads, pool.map(lambda read: run(read[0].text, read[1], environment),
                                                                reads)):
                results[command] = result
        reads.clear()

    for command in commands:
        words = shlex.split(command.text)
        program = next((w for w in words if not re.fullmatch(r"\w+=.*", w)), "")
        if program == "cd" and len(words) == 2:
            cwd = (cwd / words[1]).resolve()
            results[command] = Result(command.text, cwd, 0 if cwd.is_dir() else 1, "", "")
        elif program in ("pip", "pip3"):
            finish_reads()
            results[command] = run(command.text, cwd, environment)
        else:
            reads.append((command, cwd))
    finish_reads()
    return results


def _stem(block: Block) -> str:
    return re.sub(r"\W", "_", block.doc) + f"_{block.line}"


def start_examples(folder: Path) -> tuple[dict[str, Path], subprocess.Popen, dict[str, Path], subprocess.Popen]:
    """Start the Python examples: the test files under one plain ``python -m pytest``; the scripts and the
    fragments' imports in one interpreter, each on its own."""
    examples = python_examples()
    tests_folder, scripts_folder = folder / "user_tests", folder / "scripts"
    tests_folder.mkdir()
    scripts_folder.mkdir()
    test_files = {}
    for block in examples["tests"]:
        path = tests_folder / f"test_{_stem(block)}.py"
        path.write_text(block.text)
        test_files[block.where] = path
    environment = user_environment()
    tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-rA", "."],
                             cwd=tests_folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    scripts = {}
    for block in examples["scripts"] + examples["fragments"]:
        path = scripts_folder / f"{_stem(block)}.py"
        path.write_text(_checked_script(block) if block in examples["scripts"] else _imports(block))
        scripts[block.where] = path
    driver = textwrap.dedent("""
        import json, os, runpy, sys, traceback
        outcomes = {}
        for where, path in json.loads(sys.argv[1]).items():
            os.chdir(os.path.dirname(path))
            try:
                runpy.run_path(path, run_name="__main__")
                outcomes[where] = "ok"
            except BaseException:
                outcomes[where] = traceback.format_exc()
        print("OUTCOMES " + json.dumps(outcomes))
    """)
    runner = subprocess.Popen([sys.executable, "-c", driver, json.dumps({k: str(v) for k, v in scripts.items()})],
                              cwd=scripts_folder, env=environment, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    return test_files, tests, scripts, runner


def outcomes_by_file(output: str, files: dict[str, Path]) -> dict[str, str]:
    """Each example's worst outcome in ``pytest -rA``'s summary (PASSED, FAILED, ERROR), by doc location."""
    by_name = {path.name: where for where, path in files.items()}
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        outcome = re.match(r"(PASSED|FAILED|ERROR) (test_\w+\.py)", line)
        if outcome and outcome.group(2) in by_name and outcomes.get(by_name[outcome.group(2)]) in (None, "PASSED"):
            outcomes[by_name[outcome.group(2)]] = outcome.group(1)
    return outcomes


def with_deadline_override(commands: list[Command]) -> list[Command]:
    """The guide's commands, and after its ``pytest`` the same run with the ini option ``shimkit_deadline=1``:
    the guide's test passes under plain pytest because shimkit's plugin lifts hypothesis' deadline for it, and
    only because of that (with 1 ms it fails on ``DeadlineExceeded``)."""
    (test,) = [command for command in commands if re.fullmatch(r"pytest \S+/tests", command.text)]
    overridden = Command(f"{test.where} (deadline overridden)",
                         test.text.replace("pytest ", "pytest -o shimkit_deadline=1 ", 1), ("...DeadlineExceeded...",),
                         exit_status=1)
    at = commands.index(test) + 1
    return [*commands[:at], overridden, *commands[at:]]


# -- the tests -------------------------------------------------------------------------------------------------

GUIDE_COMMANDS = guide_commands()


def test_every_documented_command_and_example_works_as_written(tmp_path, subtests):
    """One test, so that the walkthrough runs once per suite run (xdist gives a test to one worker), and the
    Python examples alongside it; each command and example is a subtest of its own."""
    test_files, tests, scripts, runner = start_examples(tmp_path)
    try:
        project = tmp_path / "project"
        root, files = plugin_package(fenced_blocks(PLUGIN_GUIDE))
        for relative, text in files.items():
            path = project / root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        guide = run_session(with_deadline_override(GUIDE_COMMANDS), project,
                            throwaway_environment(tmp_path / "environment"))
        test_output, _ = tests.communicate(timeout=TIMEOUT_S)
        script_output, _ = runner.communicate(timeout=TIMEOUT_S)
    finally:
        for process in (tests, runner):
            if process.poll() is None:
                process.kill()
                process.wait()

    for command in with_deadline_override(GUIDE_COMMANDS):
        with subtests.test(msg=f"{command.where}: $ {command.text}"):
            result = guide[command]
            assert result.returncode == command.status, f"{command.where}: exit status\n{result.describe()}"
            missing = unmatched(command.expected, result.stdout)
            assert missing is None, f"{command.where}: the output has no line like {missing!r}\n{result.describe()}"
    with subtests.test(msg="the wheel was built, and installed in the throwaway environment only"):
        assert list((project / "dist").glob("my_cdist-0.1.0-*.whl")), "pip wheel left no wheel in dist/"
        import importlib.metadata

        importlib.invalidate_caches()
        names = {dist.metadata["Name"] for dist in importlib.metadata.distributions()}
        assert not names & {"my-cdist", "my_cdist"}, "my-cdist is installed in the suite's own environment"

    test_outcomes = outcomes_by_file(test_output, test_files)
    for where in test_files:
        with subtests.test(msg=f"{where}: a user's test file, under plain pytest"):
            assert test_outcomes.get(where) == "PASSED", f"{where}: {test_outcomes.get(where)}\n{test_output[-8000:]}"
    reported = re.search(r"^OUTCOMES (.*)$", script_output, re.M)
    script_outcomes = json.loads(reported.group(1)) if reported else {}
    for where in scripts:
        with subtests.test(msg=f"{where}: runs as a script (a fragment: its imports import)"):
            assert script_outcomes.get(where) == "ok", f"{where}: {script_outcomes.get(where)}\n{script_output[-4000:]}"


def test_the_guide_walks_through_build_install_list_test_and_audit():
    """The walkthrough is all there: a wheel built and installed, the plugin listed, its test run, audited."""
    texts = [command.text for command in GUIDE_COMMANDS]
    for step in (r"pip wheel .*--no-build-isolation", r"pip install ", r"shimkit plugins$", r"pytest \S+/tests$",
                 r"shimkit audit .*model\.py:make", r"SHIMKIT_BLOCK_PLUGINS=my_cdist shimkit audit"):
        assert any(re.match(step, text) for text in texts), f"{PLUGIN_GUIDE} has no command like {step!r}: {texts}"


def test_every_python_block_is_a_test_a_script_or_a_fragment():
    examples = python_examples()
    assert examples["tests"] and examples["scripts"], examples  # the examples are found at all
    assert [b.where for b in examples["tests"] if b.doc == "docs/testing.md"], "docs/testing.md's examples are lost"


def test_every_shell_block_is_run_or_named_with_its_reason():
    shell = [block for doc in DOCS for block in fenced_blocks(doc) if block.lang in ("bash", "sh", "shell")]
    unnamed = [f"{block.where}: {block.text.splitlines()[0]}" for block in shell
               if block.text.splitlines()[0] not in NOT_RUN]
    assert not unnamed, f"shell blocks neither written as `console` transcripts nor named in NOT_RUN: {unnamed}"
    assert len(shell) == len(NOT_RUN), "NOT_RUN names a block the docs no longer have"


@pytest.mark.parametrize("expected, line, found", [
    ("model.py:make: CLEAN", "model.py:make: CLEAN", True),
    ("model.py:make: CLEAN", "model.py:make: MISSING", False),
    ("1 passed", "==== 11 passed in 3.2s ====", False),
    ("1 passed", "==== 1 passed in 3.2s ====", True),
    ("max error per output [4.8e-07] ok", "  max error per output [1.2e-06] ok", True),
    ("max error per output [4.8e-07] ok", "  max error per output [1.2e-06] WRONG", False),
    ("my-cdist  entry_point:my_cdist  active  ...", "my-cdist     entry_point:my_cdist  active   cdist +1", True),
    ("my-cdist  entry_point:my_cdist  active  ...", "my-cdist     entry_point:my_cdist  blocked  cdist +1", False),
    ("at .../my-cdist/model.py:6 in forward: ...", "    at x (y) at /tmp/a b/my-cdist/model.py:6 in forward: z", True),
    ("at .../my-cdist/model.py:6 in forward", "    at x (y) at /tmp/a b/my-cdist/model.py:6 in forward: z", False),
])
def test_how_expected_output_is_matched(expected, line, found):
    assert bool(line_pattern(expected).search(line)) is found


def test_expected_lines_are_found_in_order():
    assert unmatched(("a", "...", "c"), "a\nb\nc\n") is None
    assert unmatched(("c", "a"), "a\nb\nc\n") == "a"

