"""Upstream's own Metal test registry, lowered and executed on Linux (issue 45, part 5).

pytorch/executorch tests its Metal backend with ``backends/apple/metal/tests/test_modules.py``: every entry
of its ``MODULE_REGISTRY`` is exported in float32 and bfloat16, run by ``executor_runner`` on a Mac, and its
output compared with eager's at the entry's own ``atol``/``rtol``. This script runs the same registry from
an extracted upstream tree (``--upstream DIR``): each module and its inputs built by upstream's own helpers
(``get_model_and_inputs``, ``get_tolerances_for_model``, ``should_skip_model``), lowered with shimkit's
plugins and executed as a whole Metal program on the stand-in runtime (``shimkit audit --execute``), then
judged twice:

* by the audit, against float64 on the example inputs (its status: clean, missing, wrong, unchecked, error);
* as upstream judges it: ``allclose(program, expected, atol, rtol)`` on all-ones inputs (what
  ``executor_runner`` feeds and what upstream's expected output is computed on), and on the example inputs.

Each module runs in a worker process of its own (a program that crashes is that module's error).

    python tools/upstream_metal_modules.py --upstream /tmp/upstream-et [--only 'sdpa*'] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import functools
import importlib
import importlib.util
import json
import subprocess
import sys
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

TEST_MODULES = Path("backends/apple/metal/tests/test_modules.py")
METAL_OPS = Path("backends/apple/metal/ops")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Imports of upstream's test file that cannot load here as they are, and what stands in for them.
STAND_INS = {
    "torchao.experimental.ops.mps": (
        "loads torchao's macOS library (libtorchao_ops_mps_aten.dylib), which Linux lacks; shimkit's "
        "torchao-linear plugin defines the ops it would register"),
}


@dataclass
class Case:
    """One registry entry in one dtype, built as upstream builds it. ``reference`` computes upstream's expected
    output (the unquantized model where the entry compares to it); ``None``: the model itself."""

    name: str
    dtype: torch.dtype
    model: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    atol: float
    rtol: float
    reference: torch.nn.Module | None = None


@dataclass
class Judgement:
    """The program's outputs against expected ones at upstream's tolerance."""

    max_abs_error: float | None = None
    max_rel_error: float | None = None
    passed: bool = False
    error: str | None = None


@dataclass
class Result:
    module: str
    dtype: str
    status: str  # the audit's, or "skipped" (upstream's own skip)
    reason: str = ""
    atol: float | None = None
    rtol: float | None = None
    ones: Judgement = field(default_factory=Judgement)  # upstream's check: all-ones inputs
    example: Judgement = field(default_factory=Judgement)  # the example (random) inputs the audit ran
    audit_max_error: float | None = None  # the audit's largest distance to eager
    # The fallback kernels the program calls, as recorded, and the shimkit plugin behind each, where there is one
    kernels: dict[str, str | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "skipped" or (self.status == "clean" and self.ones.passed and self.example.passed)


def imported_modules(source: str) -> list[str]:
    """Every module ``source`` imports, at any depth of its code, in order."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def stand_ins(source: str) -> Iterator[dict[str, str]]:
    """While active, each import of ``source`` that fails and has a stand-in finds an empty module in its
    place. Yields every import that is not loaded as installed, with why (those left failing are upstream's own
    optional imports, or make loading the file fail, saying which)."""
    notes: dict[str, str] = {}
    stubbed: list[str] = []
    for name in imported_modules(source):
        try:
            importlib.import_module(name)
        except Exception as error:  # torchao's mps package raises RuntimeError, not ImportError, off macOS
            if name in STAND_INS and name not in sys.modules:
                sys.modules[name] = types.ModuleType(name)
                stubbed.append(name)
                notes[name] = f"stubbed with an empty module while the file loads: it {STAND_INS[name]}"
            else:
                notes[name] = f"not importable here ({type(error).__name__}: {error})"[:300]
    try:
        yield notes
    finally:
        for name in stubbed:
            del sys.modules[name]


@functools.lru_cache(maxsize=None)
def load_upstream(directory: str) -> tuple[types.ModuleType, tuple[tuple[str, str], ...]]:
    """Upstream's ``test_modules.py`` from the tree at ``directory``, imported under a name of its own, and the
    notes on its imports (:func:`stand_ins`, and upstream ops files that differ from those installed)."""
    from shimkit.backend import get_registry

    get_registry()  # loads the plugins, which define torchao's int4 ops that upstream's quantization calls
    path = Path(directory) / TEST_MODULES
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; --upstream takes the root of an extracted executorch tree")
    spec = importlib.util.spec_from_file_location("upstream_metal_test_modules", path)
    assert spec is not None and spec.loader is not None  # a .py file that exists
    module = importlib.util.module_from_spec(spec)
    with stand_ins(path.read_text()) as notes:
        spec.loader.exec_module(module)
    notes.update(_ops_differences(Path(directory)))
    return module, tuple(notes.items())


def _ops_differences(root: Path) -> dict[str, str]:
    """Upstream's Metal custom ops register under fixed names (``metal::gather_qmv``), once per process, from
    the installed executorch (shimkit's metal-custom-ops plugin imports them): say where upstream's differ."""
    import executorch.backends.apple.metal.ops as installed

    notes = {}
    for theirs in sorted((root / METAL_OPS).glob("*.py")):
        ours = Path(next(iter(installed.__path__))) / theirs.name
        if not ours.is_file() or ours.read_bytes() != theirs.read_bytes():
            module = f"executorch.backends.apple.metal.ops.{theirs.stem}"
            notes[module] = "differs from upstream's; the installed one defines the op"
    return notes


def upstream_commit(directory: str) -> str | None:
    """The commit of a git checkout whose root is ``directory`` (an extracted archive has none, and a tree
    extracted inside another checkout is not that checkout)."""
    found = subprocess.run(["git", "-C", directory, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                           text=True)
    lines = found.stdout.split()
    return lines[1] if found.returncode == 0 and Path(lines[0]).resolve() == Path(directory) else None


def registry_case(upstream: types.ModuleType, name: str, dtype: torch.dtype) -> Case | str:
    """Entry ``name`` in ``dtype`` as upstream's ``_test_module_output_consistency`` builds it, or upstream's
    reason to skip it."""
    skip, why = upstream.should_skip_model(name, dtype)
    if skip:
        return why
    torch.manual_seed(0)  # upstream draws weights and inputs unseeded; seeded here so that runs repeat
    model, example_inputs = upstream.get_model_and_inputs(name, dtype=dtype)
    atol, rtol = upstream.get_tolerances_for_model(name, dtype)
    config = upstream.MODULE_REGISTRY[name]
    reference = None
    if config.get("compare_to_unquantized", bool(config.get("qlinear"))):
        reference = config["model_class"]().eval().to(dtype)
    return Case(name, dtype, model, tuple(example_inputs), atol, rtol, reference)


def judge(actual: list[Any], expected: list[Any], atol: float, rtol: float) -> Judgement:
    """Upstream's ``compare_outputs``: every output, in float32, ``allclose`` at ``atol``/``rtol``; the largest
    absolute error and the largest error relative to the larger magnitude (floored at 1e-8), as it reports them."""
    if len(actual) != len(expected):
        return Judgement(error=f"{len(actual)} outputs, expected {len(expected)}")
    absolute = relative = 0.0
    passed = True
    for index, (got, want) in enumerate(zip(actual, expected)):
        if got.shape != want.shape:
            return Judgement(error=f"output {index} has shape {list(got.shape)}, expected {list(want.shape)}")
        got, want = got.detach().float(), want.detach().float()
        difference = (got - want).abs()
        if difference.numel():
            absolute = max(absolute, float(difference.max()))
            relative = max(relative, float((difference / torch.maximum(got.abs(), want.abs()).clamp(min=1e-8)).max()))
        passed &= bool(torch.allclose(got, want, atol=atol, rtol=rtol))
    return Judgement(absolute, relative, passed)


@contextlib.contextmanager
def program_outputs(ones: tuple[torch.Tensor, ...]) -> Iterator[dict[str, Any]]:
    """While active, the audit's numerics check (``shimkit.audit.numerics.compare``) also hands over what the
    executed program and eager computed, under ``"example"``, and runs the program once more on ``ones``, under
    ``"ones"``: ``(actual, expected)`` each, or the reason the run gave none (a string)."""
    import shimkit.audit.numerics as numerics

    runs: dict[str, Any] = {}
    compare, compare_outputs = numerics.compare, numerics._compare

    def capturing(label: str) -> Callable[..., Any]:
        def judged(sizes, actual, expected, *args, **kwargs):
            runs[label] = (actual, expected)
            return compare_outputs(sizes, actual, expected, *args, **kwargs)
        return judged

    def compare_twice(lowered, delegates, eager, exported, examples, **options):
        with mock.patch.object(numerics, "_compare", capturing("example")):
            report = compare(lowered, delegates, eager, exported, examples, **options)
        with mock.patch.object(numerics, "_compare", capturing("ones")):
            # Judged here, not by the audit: no float64 reference to run.
            again = compare(lowered, delegates, eager, exported, ones, **{**options, "reference": None})
        if "ones" not in runs:
            runs["ones"] = again.unavailable or next((c.error for c in again.checks if c.error), "did not run")
        return report

    with mock.patch.object(numerics, "compare", compare_twice):
        yield runs


def _reason(audit: Any) -> str:
    if audit.failure is not None:
        return f"{audit.failure.phase}: {audit.failure.message}"
    if audit.missing:
        return "missing " + ", ".join(kernel.name for kernel in audit.missing)
    numerics = audit.numerics
    if numerics is None:
        return ""
    reason = numerics.unavailable or next((check.error for check in numerics.checks if check.error), "")
    # A fallback that refused its operands: its own message says why, the wrapper's line before it only where.
    _, refused, why = reason.partition("; runtime: ")
    return f"runtime: {why}" if refused else reason


def check(case: Case, config: Any | None = None) -> Result:
    """``case`` lowered with ``config`` (default: the process-wide registry's Metal configuration) and executed
    as a whole Metal program; the audit's verdict, and upstream's on all-ones and on the example inputs."""
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.options import AuditOptions
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import backend_config

    started = time.perf_counter()
    dtype_name = str(case.dtype).removeprefix("torch.")
    result = Result(case.name, dtype_name, status="error", atol=case.atol, rtol=case.rtol)
    ones = tuple(torch.ones_like(tensor) for tensor in case.example_inputs)
    loaded = LoadedModel(f"{case.name}[{dtype_name}]", model=case.model, example_inputs=case.example_inputs)
    config = config if config is not None else backend_config("mps")
    # Upstream exports under these two (export_model_to_metal) and computes its expected output without grad.
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad(), program_outputs(ones) as runs:
        audit = audit_loaded(loaded, config=config, options=AuditOptions(numerics="execute"))
        reference_outputs = (torch.utils._pytree.tree_leaves(case.reference(*ones))
                             if case.reference is not None else None)
    result.status, result.reason = audit.status, _reason(audit)
    result.kernels = {kernel.name: getattr(config.provider_of(kernel.name), "plugin", None)
                      for kernel in audit.kernels}
    if audit.numerics is not None and audit.numerics.checks:
        result.audit_max_error = max(audit.numerics.checks[0].max_errors, default=None)
    for label in ("example", "ones"):
        run = runs.get(label, result.reason or "the program did not run")
        if isinstance(run, str):
            setattr(result, label, Judgement(error=run))
            continue
        actual, expected = run
        if label == "ones" and reference_outputs is not None:
            expected = reference_outputs
        setattr(result, label, judge(actual, expected, case.atol, case.rtol))
    result.seconds = time.perf_counter() - started
    return result


def run_registry_entry(upstream_dir: str, task: tuple[str, str]) -> Result:
    """One registry entry in one dtype (a worker's task)."""
    name, dtype_name = task
    upstream, _ = load_upstream(upstream_dir)
    started = time.perf_counter()
    try:
        case = registry_case(upstream, name, DTYPES[dtype_name])
    except Exception as error:
        return Result(name, dtype_name, "error", f"building the module: {type(error).__name__}: {error}"[:500],
                      seconds=time.perf_counter() - started)
    if isinstance(case, str):
        return Result(name, dtype_name, "skipped", case)
    return check(case)


def _failed(task: tuple[str, str], failure: Any) -> Result:
    return Result(task[0], task[1], "error", f"{failure.phase}: {failure.message}"[:500], seconds=failure.seconds)


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def markdown(results: list[Result]) -> str:
    lines = ["| module | dtype | audit status | max error, ones | max error, example | upstream atol / rtol "
             "| upstream check | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        notes = [r.reason] if r.reason else [f"{label}: {j.error}" for label, j in
                                             (("ones", r.ones), ("example", r.example)) if j.error]
        verdict = "skipped" if r.status == "skipped" else "**pass**" if r.passed else "FAIL"
        tolerance = "–" if r.atol is None else f"{r.atol:g} / {r.rtol:g}"
        lines.append(f"| `{r.module}` | {r.dtype} | {r.status} | {_number(r.ones.max_abs_error)} "
                     f"| {_number(r.example.max_abs_error)} | {tolerance} | {verdict} "
                     f"| {_cell('; '.join(notes))} |")
    passed = sum(r.passed and r.status != "skipped" for r in results)
    lines.append("")
    lines.append(f"{passed} of {sum(r.status != 'skipped' for r in results)} pass "
                 f"({sum(r.status == 'skipped' for r in results)} skipped by upstream's registry).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from shimkit.audit.workers import run_tasks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, metavar="DIR", help="root of an extracted executorch tree")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="registry entries matching this glob (repeatable; default: all)")
    parser.add_argument("--dtype", choices=[*DTYPES, "all"], default="all")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per module and dtype")
    args = parser.parse_args(argv)

    directory = str(Path(args.upstream).resolve())
    try:
        upstream, notes = load_upstream(directory)  # before the workers fork: each inherits it loaded
    except FileNotFoundError as error:
        parser.error(str(error))
    for module, note in notes:
        print(f"import {module}: {note}", file=sys.stderr)
    names = [n for n in upstream.MODULE_REGISTRY if not args.only or any(fnmatch.fnmatch(n, p) for p in args.only)]
    if not names:
        parser.error(f"no registry entry matches {args.only}; there are: {', '.join(upstream.MODULE_REGISTRY)}")
    dtypes = list(DTYPES) if args.dtype == "all" else [args.dtype]
    tasks = [(name, dtype) for name in names for dtype in dtypes]

    def progress(index: int, total: int, task: tuple[str, str], result: Result | None) -> None:
        if result is None:
            print(f"[{index + 1}/{total}] {task[0]} {task[1]} ...", file=sys.stderr, flush=True)
        else:
            print(f"[{index + 1}/{total}] {task[0]} {task[1]}: {result.status}, upstream check "
                  f"{'pass' if result.passed else 'FAIL'} ({result.seconds:.0f} s)", file=sys.stderr, flush=True)

    started = time.perf_counter()
    results, interrupted = run_tasks(functools.partial(run_registry_entry, directory), tasks, jobs=1,
                                     on_failure=_failed, timeout=args.timeout, tasks_per_worker=1,
                                     on_progress=progress)
    wall = time.perf_counter() - started
    print(markdown(results))
    print(f"\n{len(results)} runs in {wall:.0f} s", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "upstream": directory, "upstream_commit": upstream_commit(directory),
            "imports": dict(notes), "wall_s": round(wall, 1), "interrupted": interrupted,
            "results": [{**asdict(r), "passed": r.passed} for r in results]}, indent=2) + "\n")
    if interrupted:
        return 130
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
