"""Upstream's own Metal test registry, lowered and executed on Linux, stock and with shimkit (issue 45, part 5;
issue 66, part 5).

pytorch/executorch tests its Metal backend with ``backends/apple/metal/tests/test_modules.py``: every entry
of its ``MODULE_REGISTRY`` is exported in float32 and bfloat16, run by ``executor_runner`` on a Mac, and its
output compared with eager's at the entry's own ``atol``/``rtol``. This script runs the same registry from
an extracted upstream tree (``--upstream DIR``): each module and its inputs built by upstream's own helpers
(``get_model_and_inputs``, ``get_tolerances_for_model``, ``should_skip_model``), lowered and executed as a
whole Metal program on shimkit's stand-in of the Metal runtime (``shimkit audit --execute``, which reproduces
upstream's runtime bugs) in two configurations (``--runtime-config``):

* **stock**: ExecuTorch's own ``MetalBackend`` with no shimkit plugin, as ``shimkit audit --no-plugins`` lowers
  (``audit_loaded(..., config=None)``): the program upstream's own test runs on a Mac;
* **shimkit**: the backend configured from shimkit's plugin registry (``backend_config("mps")``).

Each run is judged twice:

* by the audit, against float64 on the example inputs (its status: clean, missing, wrong, unchecked, error);
* as upstream judges it: ``allclose(program, expected, atol, rtol)`` on all-ones inputs (what
  ``executor_runner`` feeds and what upstream's expected output is computed on), and on the example inputs.

The registry is upstream's plus the five conv2d modules of pytorch/executorch#22952 (:data:`PR_22952_CONV2D`,
left out with ``--no-pr-22952``), which that pull request adds to ``MODULE_REGISTRY`` and which are not on
upstream's main: stock they are wrong as pytorch/executorch#22951 describes.

Each module, dtype and configuration runs in a forked worker process of its own, torch on one thread (a crash is
that run's error). The exit status is 0 when every shimkit run passes: stock failures are findings, not the tool's.

    python tools/upstream_metal_modules.py --upstream /tmp/upstream-et [--only 'sdpa*'] [--dtype bfloat16]
        [--runtime-config stock|shimkit|both] [--skip-stock PATTERN] [--no-pr-22952]
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
from torch import nn
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
# The two ways a module is lowered and run (``--runtime-config``): ExecuTorch's own Metal backend, as
# ``shimkit audit --no-plugins`` audits it, and the backend configured from shimkit's plugin registry.
RUNTIME_CONFIGS = ("stock", "shimkit")


# pytorch/executorch#22952 ("Metal backend: honor channels-last strides in conv2d", open, fixing #22951) says of its
# test plan: "Added five conv2d modules to MODULE_REGISTRY in backends/apple/metal/tests/test_modules.py (plain,
# bias with batch 2, stride..." and is cut there. The five below are written from that description in upstream's
# registry format; what the description does not say is inferred and said so. Every one has a 3x3 kernel (Inductor
# lowers a 1x1 convolution to mm, which would not reach aoti_torch_mps_convolution) and at least 8 input channels
# (with one, Inductor keeps the convolution contiguous, the case the PR's review discusses), so that Inductor's
# layout optimisation hands the runtime channels-last operands, as #22951 describes.
class Conv2dPlain(nn.Module):
    """"plain" (the PR's word): no bias, stride 1. Channels, kernel and padding inferred."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


class Conv2dBiasBatch2(nn.Module):
    """"bias with batch 2" (the PR's words; the batch is the input's). Channels, kernel and padding inferred."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1, bias=True)

    def forward(self, x):
        return self.conv(x)


class Conv2dStride2(nn.Module):
    """"stride..." (the PR's word, cut there): stride 2, with padding 1 (inferred)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


class Conv2dDepthwise(nn.Module):
    """Inferred: a depthwise convolution (groups = channels), the single ``Conv2d(8, 8, 3, padding=1,
    groups=8)`` on 1x8x16x16 whose generated wrapper pytorch/executorch#22951 quotes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8)

    def forward(self, x):
        return self.conv(x)


class Conv2dDepthwisePointwise(nn.Module):
    """Inferred: a MobileNet-style block (#22951's model is torchvision's mobilenet_v3_small), a depthwise
    convolution then a regular one; the second has a 3x3 kernel, not MobileNet's 1x1, which Inductor lowers to mm."""

    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8)
        self.pointwise = nn.Conv2d(8, 16, kernel_size=3, padding=1)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


# Upstream's registry format; tolerances are upstream's defaults (no entry overrides them).
PR_22952_CONV2D: dict[str, dict[str, Any]] = {
    "conv2d_plain": {
        "model_class": Conv2dPlain,
        "input_shapes": [(1, 8, 16, 16)],
        "description": "Conv2d 8 -> 16 channels, 3x3, no bias (pytorch/executorch#22952: 'plain')",
    },
    "conv2d_bias_batch2": {
        "model_class": Conv2dBiasBatch2,
        "input_shapes": [(2, 8, 16, 16)],
        "description": "Conv2d 8 -> 16 channels, 3x3, with bias, batch 2 (pytorch/executorch#22952: 'bias with "
                       "batch 2')",
    },
    "conv2d_stride2": {
        "model_class": Conv2dStride2,
        "input_shapes": [(1, 8, 16, 16)],
        "description": "Conv2d 8 -> 16 channels, 3x3, stride 2, padding 1 (pytorch/executorch#22952: 'stride...', "
                       "the rest inferred)",
    },
    "conv2d_depthwise": {
        "model_class": Conv2dDepthwise,
        "input_shapes": [(1, 8, 16, 16)],
        "description": "Depthwise Conv2d, 8 channels, groups=8 (inferred; pytorch/executorch#22951's example)",
    },
    "conv2d_depthwise_pointwise": {
        "model_class": Conv2dDepthwisePointwise,
        "input_shapes": [(1, 8, 16, 16)],
        "description": "Depthwise Conv2d(8, 8, groups=8) then Conv2d(8, 16), MobileNet-style (inferred)",
    },
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
    runtime: str = "shimkit"  # the configuration: "stock" or "shimkit" (RUNTIME_CONFIGS)

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
def load_upstream(directory: str, pr_22952: bool = False) -> tuple[types.ModuleType, tuple[tuple[str, str], ...]]:
    """Upstream's ``test_modules.py`` from the tree at ``directory``, imported under a name of its own, and the
    notes on its imports (:func:`stand_ins`, and upstream ops files that differ from those installed).
    ``pr_22952``: :data:`PR_22952_CONV2D`'s entries added to its ``MODULE_REGISTRY`` (:func:`add_pr_22952`)."""
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
    if pr_22952:
        add_pr_22952(module)
    return module, tuple(notes.items())


def add_pr_22952(upstream: types.ModuleType) -> list[str]:
    """:data:`PR_22952_CONV2D`'s entries added to ``upstream.MODULE_REGISTRY``, after its own, so that upstream's
    helpers build and judge them as they do its own entries; an entry of that name upstream already has (the
    pull request merged) is upstream's and is kept. Returns the names added."""
    added = [name for name in PR_22952_CONV2D if name not in upstream.MODULE_REGISTRY]
    for name in added:
        upstream.MODULE_REGISTRY[name] = PR_22952_CONV2D[name]
    return added


def pr_22952_entries(upstream: types.ModuleType) -> list[str]:
    """The entries of ``upstream.MODULE_REGISTRY`` that are this script's :data:`PR_22952_CONV2D`, not upstream's."""
    return [name for name, entry in upstream.MODULE_REGISTRY.items() if PR_22952_CONV2D.get(name) is entry]


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


def check(case: Case, runtime: str = "shimkit") -> Result:
    """``case`` lowered in the configuration ``runtime`` names (``"stock"``: ExecuTorch's own Metal backend, no
    plugin, as ``shimkit audit --no-plugins``; ``"shimkit"``: the process-wide registry's Metal configuration) and
    executed as a whole Metal program; the audit's verdict, and upstream's on all-ones and on the example inputs."""
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.options import AuditOptions
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import backend_config

    if runtime not in RUNTIME_CONFIGS:
        raise ValueError(f"runtime must be one of {RUNTIME_CONFIGS}, got {runtime!r}")
    started = time.perf_counter()
    dtype_name = str(case.dtype).removeprefix("torch.")
    result = Result(case.name, dtype_name, status="error", atol=case.atol, rtol=case.rtol, runtime=runtime)
    ones = tuple(torch.ones_like(tensor) for tensor in case.example_inputs)
    loaded = LoadedModel(f"{case.name}[{dtype_name}]", model=case.model, example_inputs=case.example_inputs)
    # None is the stock backend to audit_loaded (shimkit.audit.runner.run_audit passes it for plugins=False).
    config = backend_config("mps") if runtime == "shimkit" else None
    # Upstream exports under these two (export_model_to_metal) and computes its expected output without grad.
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad(), program_outputs(ones) as runs:
        audit = audit_loaded(loaded, config=config, options=AuditOptions(numerics="execute"))
        reference_outputs = (torch.utils._pytree.tree_leaves(case.reference(*ones))
                             if case.reference is not None else None)
    result.status, result.reason = audit.status, _reason(audit)
    result.kernels = {kernel.name: None if config is None else getattr(config.provider_of(kernel.name), "plugin", None)
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


def run_registry_entry(upstream_dir: str, task: tuple[str, ...], pr_22952: bool = False) -> Result:
    """One registry entry in one dtype and configuration (a worker's task): ``(name, dtype)`` or ``(name, dtype,
    runtime)``, ``runtime`` one of :data:`RUNTIME_CONFIGS` (default ``"shimkit"``). The module, its inputs and
    weights are built afresh, seeded, for each configuration: the same in both."""
    name, dtype_name, runtime = (*task, "shimkit")[:3]
    upstream, _ = load_upstream(upstream_dir, pr_22952)
    started = time.perf_counter()
    try:
        case = registry_case(upstream, name, DTYPES[dtype_name])
    except Exception as error:
        return Result(name, dtype_name, "error", f"building the module: {type(error).__name__}: {error}"[:500],
                      seconds=time.perf_counter() - started, runtime=runtime)
    if isinstance(case, str):
        return Result(name, dtype_name, "skipped", case, runtime=runtime)
    return check(case, runtime)


def single_threaded_torch() -> None:
    """Each worker runs torch on one thread, as ``shimkit audit``'s do (``shimkit.audit.parallel``): workers are
    forked, and GNU OpenMP's thread pool does not survive a fork. A caller that ran a parallel torch op before
    the fork (a test, an earlier in-process check) would otherwise leave the worker waiting at its first one."""
    torch.set_num_threads(1)


def _failed(task: tuple[str, ...], failure: Any) -> Result:
    return Result(task[0], task[1], "error", f"{failure.phase}: {failure.message}"[:500], seconds=failure.seconds,
                  runtime=(*task, "shimkit")[2])


@dataclass
class Row:
    """One module in one dtype, in both configurations: ``None`` where that configuration was not run."""

    module: str
    dtype: str
    stock: Result | None = None
    shimkit: Result | None = None

    @property
    def tolerance(self) -> tuple[float | None, float | None]:
        result = self.shimkit or self.stock
        return (None, None) if result is None else (result.atol, result.rtol)


def rows_of(results: list[Result]) -> list[Row]:
    """``results`` paired by module and dtype, in the order they first appear."""
    rows: dict[tuple[str, str], Row] = {}
    for result in results:
        row = rows.setdefault((result.module, result.dtype), Row(result.module, result.dtype))
        setattr(row, result.runtime, result)
    return list(rows.values())


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _verdict(result: Result | None) -> str:
    if result is None:
        return "not run"
    return "skipped" if result.status == "skipped" else "**pass**" if result.passed else "FAIL"


def _errors(result: Result | None) -> str:
    if result is None or result.status == "skipped":
        return "–"
    return f"{_number(result.ones.max_abs_error)} / {_number(result.example.max_abs_error)}"


def _why(result: Result) -> str:
    """Why ``result`` did not pass: the audit's reason, else what upstream's check found; said first where the
    all-ones run, upstream's own comparison, is within tolerance all the same (all-ones inputs hide the bug)."""
    if result.reason:
        if result.ones.passed and result.status in ("wrong", "missing", "unchecked"):
            return f"all ones within tolerance (upstream's own comparison passes); {result.reason}"
        return result.reason
    failed = [f"{label}: {judgement.error}" for label, judgement in (("ones", result.ones), ("example", result.example))
              if judgement.error]
    failed += [f"{label}: not allclose at upstream's tolerance" for label, judgement in
               (("ones", result.ones), ("example", result.example)) if not judgement.error and not judgement.passed]
    return "; ".join(failed)


def _count(rows: list[Row], runtime: str) -> str:
    ran = [r for r in (getattr(row, runtime) for row in rows) if r is not None and r.status != "skipped"]
    if not ran:
        return f"{runtime}: not run"
    return f"{runtime}: {sum(r.passed for r in ran)} of {len(ran)} pass"


def markdown(results: list[Result], limit: int = 320) -> str:
    """One row per module and dtype, the stock and the shimkit verdicts side by side (``not run`` where that
    configuration was not run), and why each one that failed failed (its text cut at ``limit`` characters)."""
    rows = rows_of(results)
    lines = ["| module | dtype | upstream atol / rtol | stock: audit | stock: max error, ones / example "
             "| stock: upstream check | shimkit: audit | shimkit: max error, ones / example "
             "| shimkit: upstream check | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        atol, rtol = row.tolerance
        tolerance = "–" if atol is None else f"{atol:g} / {rtol:g}"
        notes = []
        for runtime in RUNTIME_CONFIGS:
            result = getattr(row, runtime)
            if result is not None and not result.passed:
                notes.append(f"{runtime}: {_cell(_why(result), limit)}")
            elif result is not None and result.status == "skipped":
                notes.append(f"{runtime}: skipped: {_cell(result.reason, limit)}")
        statuses = [(r.status if r is not None else "–") for r in (row.stock, row.shimkit)]
        lines.append(f"| `{row.module}` | {row.dtype} | {tolerance} | {statuses[0]} | {_errors(row.stock)} "
                     f"| {_verdict(row.stock)} | {statuses[1]} | {_errors(row.shimkit)} | {_verdict(row.shimkit)} "
                     f"| {'; '.join(notes)} |")
    skipped = sum(any(r is not None and r.status == "skipped" for r in (row.stock, row.shimkit)) for row in rows)
    lines.append("")
    lines.append(f"{_count(rows, 'stock')}; {_count(rows, 'shimkit')} "
                 f"({skipped} skipped by upstream's registry).")
    differ = [f"`{row.module}` {row.dtype}" for row in rows if row.stock is not None and row.shimkit is not None
              and row.stock.passed != row.shimkit.passed]
    if differ:
        lines.append(f"The two differ on {len(differ)}: {', '.join(differ)}.")
    unrun = [f"`{row.module}` {row.dtype}" for row in rows if row.stock is None and row.shimkit is not None]
    if unrun and any(row.stock is not None for row in rows):
        lines.append(f"Not run stock (`--skip-stock`): {', '.join(unrun)}.")
    return "\n".join(lines)


def results_from_json(document: dict[str, Any]) -> list[Result]:
    """The results a ``--json`` document records, as :class:`Result` again (``--render``)."""
    results = []
    for row in document["results"]:
        for runtime in RUNTIME_CONFIGS:
            recorded = dict(row.get(runtime) or {})
            if not recorded:
                continue
            recorded.pop("passed", None)
            recorded["ones"], recorded["example"] = Judgement(**recorded["ones"]), Judgement(**recorded["example"])
            results.append(Result(**recorded))
    return results


def exit_status(results: list[Result], interrupted: bool) -> int:
    """0 when every shimkit run passed (stock runs never fail the tool: their failures are upstream's bugs, the
    findings), 1 otherwise; 130 when Ctrl-C cut the run short."""
    if interrupted:
        return 130
    return 0 if all(r.passed for r in results if r.runtime == "shimkit") else 1


def main(argv: list[str] | None = None) -> int:
    from shimkit.audit.workers import run_tasks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", metavar="DIR", help="root of an extracted executorch tree (required unless "
                                                                "--render)")
    parser.add_argument("--render", action="append", metavar="JSON",
                        help="print the Markdown table of earlier runs' --json files and exit with their status; runs "
                             "nothing (repeatable: a later file's run of a module, dtype and configuration replaces "
                             "an earlier one's)")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="registry entries matching this glob (repeatable; default: all)")
    parser.add_argument("--dtype", choices=[*DTYPES, "all"], default="all")
    parser.add_argument("--runtime-config", choices=[*RUNTIME_CONFIGS, "both"], default="both",
                        help="stock: ExecuTorch's Metal backend with no shimkit plugin (as shimkit audit "
                             "--no-plugins); shimkit: with shimkit's plugins; both (default): each entry both ways")
    parser.add_argument("--skip-stock", action="append", default=[], metavar="PATTERN",
                        help="entries matching this glob are run with shimkit only (repeatable; for the slowest)")
    parser.add_argument("--no-pr-22952", dest="pr_22952", action="store_false",
                        help="leave out the five conv2d modules of pytorch/executorch#22952 (default: added)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per module, dtype and configuration")
    args = parser.parse_args(argv)
    if args.render:
        documents = [json.loads(Path(path).read_text()) for path in args.render]
        results = [result for document in documents for result in results_from_json(document)]
        print(markdown(results))
        return exit_status(results, any(document.get("interrupted", False) for document in documents))
    if not args.upstream:
        parser.error("--upstream is required")

    directory = str(Path(args.upstream).resolve())
    try:
        upstream, notes = load_upstream(directory, args.pr_22952)  # before the workers fork: each inherits it
    except FileNotFoundError as error:
        parser.error(str(error))
    for module, note in notes:
        print(f"import {module}: {note}", file=sys.stderr)
    added = pr_22952_entries(upstream)
    if added:
        print(f"added from pytorch/executorch#22952: {', '.join(added)}", file=sys.stderr)
    names = [n for n in upstream.MODULE_REGISTRY if not args.only or any(fnmatch.fnmatch(n, p) for p in args.only)]
    if not names:
        parser.error(f"no registry entry matches {args.only}; there are: {', '.join(upstream.MODULE_REGISTRY)}")
    dtypes = list(DTYPES) if args.dtype == "all" else [args.dtype]
    runtimes = list(RUNTIME_CONFIGS) if args.runtime_config == "both" else [args.runtime_config]
    not_stock = [n for n in names if any(fnmatch.fnmatch(n, p) for p in args.skip_stock)]
    tasks = [(name, dtype, runtime) for name in names for dtype in dtypes for runtime in runtimes
             if not (runtime == "stock" and name in not_stock)]
    if not tasks:
        parser.error("--skip-stock leaves nothing to run")

    def progress(index: int, total: int, task: tuple[str, str, str], result: Result | None) -> None:
        what = " ".join(task)
        if result is None:
            print(f"[{index + 1}/{total}] {what} ...", file=sys.stderr, flush=True)
        else:
            print(f"[{index + 1}/{total}] {what}: {result.status}, upstream check "
                  f"{'pass' if result.passed else 'FAIL'} ({result.seconds:.0f} s)", file=sys.stderr, flush=True)

    started = time.perf_counter()
    results, interrupted = run_tasks(functools.partial(run_registry_entry, directory, pr_22952=args.pr_22952),
                                     tasks, jobs=1, on_failure=_failed, timeout=args.timeout, tasks_per_worker=1,
                                     initializer=single_threaded_torch, on_progress=progress)
    wall = time.perf_counter() - started
    print(markdown(results))
    seconds = {runtime: sum(r.seconds for r in results if r.runtime == runtime) for runtime in runtimes}
    print(f"\n{len(results)} runs in {wall:.0f} s ("
          + ", ".join(f"{runtime} {total:.0f} s" for runtime, total in seconds.items()) + ")", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "upstream": directory, "upstream_commit": upstream_commit(directory),
            "imports": dict(notes), "pr_22952": added, "runtime_configs": runtimes,
            "stock_skipped": [n for n in not_stock if "stock" in runtimes],
            "argv": sys.argv[1:] if argv is None else argv,
            "wall_s": round(wall, 1), "seconds_by_runtime": {k: round(v, 1) for k, v in seconds.items()},
            "interrupted": interrupted, "exit_status": exit_status(results, interrupted),
            "results": [{"module": row.module, "dtype": row.dtype,
                         **{runtime: None if (r := getattr(row, runtime)) is None else {**asdict(r), "passed": r.passed}
                            for runtime in RUNTIME_CONFIGS}}
                        for row in rows_of(results)]}, indent=2) + "\n")
    return exit_status(results, interrupted)


if __name__ == "__main__":
    sys.exit(main())
