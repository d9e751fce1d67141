"""The OpInfo coverage sweep: every op of PyTorch's OpInfo database, audited stock and with shimkit.

Each op's first sample input (``torch.testing._internal.common_methods_invocations.op_db``, forward only)
becomes a one-op model whose tensors are its inputs; it is exported and audited twice, with the stock
``MetalBackend`` (``--no-plugins``) and with shimkit's registry. Each result is classified:

* ``clean``: lowers with every kernel provided;
* ``missing``: lowers, but calls kernels the runtime lacks;
* ``pre-backend``: stops before the backend sees it, in ``to_edge`` (an op that is not core ATen and that no
  plugin decomposes first): a failure like ``missing`` or ``error``, since the model does not lower;
* ``limitation``: the audit method cannot finish it (real work on the fake device);
* ``error``: anything else in the backend;
* ``not-exportable``: ``torch.export`` itself fails (torch's gap, not ExecuTorch's);
* ``no-sample``: OpInfo has no sample in that dtype; ``timeout``: the audit did not finish.

The ops that fail with shimkit only for Metal's lack of float64 are audited once more with the float64
policy ``float32`` (``shimkit.passes.float64``), their numbers checked against float64 eager (status
``wrong`` where they do not hold), in a section of their own.

Run ``python -m shimkit.audit.coverage -j 2 --json coverage.json --markdown docs/coverage.md``; ``--ops``
takes name patterns for a subset; ``--update coverage.json --ops PATTERN ...`` audits those ops again and
reports the stored sweep with their rows replaced (the Markdown names them). Workers are processes forked
from the sweep's (shimkit.audit.workers); a crash or timeout in one op is that op's result, never the
sweep's end, and Ctrl-C writes the reports of the ops finished (exit status 130).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from shimkit.audit.chart import INELIGIBLE, chart_sweep
from shimkit.audit.options import AuditOptions, Numerics
from shimkit.audit.workers import TaskFailure, run_tasks

STATUSES = ("clean", "missing", "pre-backend", "limitation", "error", "not-exportable", "no-sample", "timeout")
# The phases in which a failure means the model never reached the backend.
PRE_BACKEND_PHASES = ("to_edge",)


@dataclass
class OpResult:
    """One op in one dtype: its stock and shimkit status and the reason behind each non-clean one."""

    op: str
    dtype: str
    stock: str
    shimkit: str
    stock_detail: str = ""
    shimkit_detail: str = ""
    seconds: float = 0.0

    @property
    def fixed(self) -> bool:
        return self.stock != "clean" and self.shimkit == "clean"

    @property
    def regressed(self) -> bool:
        return self.stock == "clean" and self.shimkit != "clean"


def op_names(patterns: Iterable[str] = ()) -> list[str]:
    """The OpInfo names (``name`` plus ``.variant``), filtered by fnmatch ``patterns``."""
    from torch.testing._internal.common_methods_invocations import op_db

    names = sorted(dict.fromkeys(_full_name(op) for op in op_db))
    patterns = list(patterns)
    return [n for n in names if not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def _full_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _opinfo(name: str) -> Any:
    from torch.testing._internal.common_methods_invocations import op_db

    return next(op for op in op_db if _full_name(op) == name)


def one_op_model(op: Any, sample: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(module, inputs)``: ``module(*inputs)`` calls the op on ``sample``, its tensors made the inputs."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    function = op.op

    class OneOp(torch.nn.Module):
        def forward(self, *tensors: Any) -> Any:
            values = list(leaves)
            for slot, tensor in zip(slots, tensors):
                values[slot] = tensor
            first, args, kwargs = pytree.tree_unflatten(values, spec)
            return function(first, *args, **kwargs)

    return OneOp(), tuple(leaves[i] for i in slots)


def _status(audit: Any) -> tuple[str, str]:
    if audit.failure is None:
        if audit.missing:
            return "missing", ", ".join(sorted({k.name for k in audit.missing}))
        numerics = audit.numerics
        if numerics is not None and numerics.checks:
            error = max((e for check in numerics.checks for e in check.max_errors), default=0.0)
            if not numerics.ok:
                return "wrong", next((c.error for c in numerics.checks if c.error), f"max error {error:.3g}")
            return "clean", f"max error {error:.3g}"
        return "clean", ""
    failure = audit.failure
    message = failure.message.splitlines()[0][:300] if failure.message else ""
    if failure.phase == "export":
        return "not-exportable", message
    if failure.kind == "limitation":
        return "limitation", message
    if failure.phase in PRE_BACKEND_PHASES:
        return "pre-backend", message
    return "error", f"{failure.phase}: {message}"


def audit_op(name: str, dtype_name: str, options: AuditOptions = AuditOptions()) -> OpResult:
    """Audit one OpInfo op stock and with shimkit (in this process) under ``options`` (their float64 policy
    decides the shimkit run; with numerics, a clean lowering must match eager's numbers too: a result that
    does not is "wrong", its error the detail)."""
    import torch

    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import backend_config

    start = time.perf_counter()
    op = _opinfo(name)
    dtype = getattr(torch, dtype_name)
    if dtype not in op.supported_dtypes("cpu"):
        return OpResult(name, dtype_name, "no-sample", "no-sample", "dtype not supported by the op")
    try:
        sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=False)))
    except StopIteration:
        return OpResult(name, dtype_name, "no-sample", "no-sample", "OpInfo gives no sample")
    except Exception as error:  # a broken sample generator is reported like any other result
        return OpResult(name, dtype_name, "no-sample", "no-sample", f"{type(error).__name__}: {error}"[:300])
    model, inputs = one_op_model(op, sample)
    results = []
    for config in (None, backend_config("mps")):
        try:  # exported afresh for each audit: lowering consumes parts of the program (lifted constants)
            exported = torch.export.export(model, inputs, strict=False)
        except Exception as error:
            detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
            return OpResult(name, dtype_name, "not-exportable", "not-exportable", detail, detail,
                            time.perf_counter() - start)
        audit = audit_loaded(LoadedModel(name, exported=exported), config=config,
                             options=options if config is not None else options.stock())
        results.append(_status(audit))
    (stock, stock_detail), (shimkit, shimkit_detail) = results
    return OpResult(name, dtype_name, stock, shimkit, stock_detail, shimkit_detail, time.perf_counter() - start)


def _quietly(task: tuple[str, str]) -> dict[str, Any]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return asdict(audit_op(*task))


def _quiet_worker() -> None:
    import logging

    import torch

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # torch and torchao print load warnings
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)  # one core per worker; GNU OpenMP's thread pool does not survive a fork


def _preload() -> None:
    """What every op's audit needs, imported and built once here, so that the forked workers share it
    instead of each importing torch, ExecuTorch, Inductor and the OpInfo database again."""
    from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401

    from shimkit.audit.runner import audit_loaded  # noqa: F401
    from shimkit.backend import backend_config

    backend_config("mps")


def _failed(task: tuple[str, str], failure: TaskFailure) -> dict[str, Any] | None:
    name, dtype = task
    if failure.phase == "interrupted":
        return None
    status = "timeout" if failure.phase == "timeout" else "error"
    detail = failure.message[:300]
    return asdict(OpResult(name, dtype, status, status, detail, detail, round(failure.seconds, 1)))


def sweep(names: list[str], dtypes: list[str], jobs: int, timeout: float,
          progress: Any = None) -> tuple[list[OpResult], bool]:
    """Every (op, dtype) audited in ``jobs`` worker processes (:mod:`shimkit.audit.workers`), each within
    ``timeout`` seconds: the results, and whether Ctrl-C cut the sweep short (the results then cover the
    ops finished before it)."""
    tasks = [(name, dtype) for name in names for dtype in dtypes]
    _preload()

    def report(index: int, total: int, task: tuple[str, str], result: dict[str, Any] | None) -> None:
        if progress is not None and result is not None:
            progress(index + 1, total, OpResult(**result))

    # A worker is retired after 50 ops: each audit leaves some of Inductor's and the fake device's
    # caches behind.
    rows, interrupted = run_tasks(_quietly, tasks, jobs=jobs, timeout=timeout, on_failure=_failed,
                                  initializer=_quiet_worker, tasks_per_worker=50, on_progress=report)
    return [OpResult(**row) for row in rows if row is not None], interrupted


# Ops shimkit could let through or decompose but does not, and why: found by running Inductor's Metal code
# for them on the CPU (plugins/metal_generated.py). The sweep cannot see this; the report lists it.
HELD_BACK = {
    "special.erfcx": "Inductor's Metal code computes exp(x*x) * erfc(x): 0 from x = 4.4 on, ATen 0.11",
    "digamma": "Metal's digamma gives 2e7 for x in (-1e-20, 0), ATen's about -1/x (up to 1e30)",
    "lgamma": "Metal's lgamma gives inf for x in (-1e-20, 0), ATen's -log|x| (69 at -1e-30)",
    "polygamma": "Metal's polygamma is 1e-4 off below -20 and NaN where ATen's is finite",
    "special.zeta": "Metal's zeta gives NaN where ATen's underflows to 0 (large arguments)",
    "special.hermite_polynomial_he": "NaN where ATen's overflows to -inf (large degree and x)",
    "special.chebyshev_polynomial_v": "NaN x: Metal gives 0, ATen NaN",
    "special.chebyshev_polynomial_w": "NaN x: Metal gives 0, ATen NaN",
    "special.shifted_chebyshev_polynomial_*": "NaN x: Metal gives 0 or 1, ATen NaN (or 1, its own kernels "
                                              "disagree)",
    "ldexp": "Inductor's Metal code generator has no ldexp for integer exponents (NotImplementedError)",
}


def _held_back(op: str) -> str | None:
    return next((why for pattern, why in HELD_BACK.items()
                 if fnmatch.fnmatchcase(op, pattern) or fnmatch.fnmatchcase(op, pattern + ".*")), None)


def float64_opt_in(results: list[OpResult]) -> list[OpResult]:
    """The ops that fail with shimkit only because Metal has no float64, audited again (in this process) with
    the float64 policy ``float32`` and their numbers checked against float64 eager."""
    options = AuditOptions(numerics=Numerics.CHECK, float64="float32")
    return [audit_op(r.op, r.dtype, options) for r in results
            if r.shimkit == "error" and "float64" in r.shimkit_detail]


def updated_sweep(stored: dict[str, Any], fresh: list[OpResult],
                  fresh_float64: list[OpResult]) -> tuple[list[OpResult], list[OpResult]]:
    """A stored sweep (as loaded) with ``fresh``'s (op, dtype) rows in place of its own, new pairs added in
    order, and its float64 opt-in rows for those pairs replaced by ``fresh_float64``."""
    new = {(r.op, r.dtype): r for r in fresh}
    results = [new.pop(key) if (key := (row["op"], row["dtype"])) in new else OpResult(**row)
               for row in stored["results"]]
    results += sorted(new.values(), key=lambda r: (r.op, r.dtype))
    again = {(r.op, r.dtype) for r in fresh}
    float64 = [OpResult(**row) for row in stored.get("float64_opt_in", []) if (row["op"], row["dtype"]) not in again]
    return results, float64 + list(fresh_float64)


def _stored_sweep(path: str) -> dict[str, Any]:
    """``--update``'s FILE, read while parsing: a sweep's JSON (``--json``), else a usage error naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"cannot read the stored sweep {path}: {error}") from None
    if not isinstance(stored, dict) or not {"results", "seconds", "jobs"} <= stored.keys():
        raise argparse.ArgumentTypeError(f"{path} is not a coverage sweep's JSON (no results, seconds, jobs)")
    return stored


def totals(results: list[OpResult]) -> dict[str, dict[str, int]]:
    """Counts per status, stock and with shimkit."""
    return {"stock": dict(Counter(r.stock for r in results)), "shimkit": dict(Counter(r.shimkit for r in results))}


def goal(results: list[OpResult]) -> dict[str, Any]:
    """Issue 13's measure, as issue 48 counts it: of the ops whose float32 sample exports, the share that
    lowers clean with shimkit. A stop in ``to_edge`` is a failure here, not a reason to leave the op out: the
    model does not lower, whichever stage refuses it."""
    eligible = [r for r in results if r.dtype == "float32" and r.stock not in INELIGIBLE]
    clean = [r for r in eligible if r.shimkit == "clean"]
    return {"eligible": len(eligible), "clean_with_shimkit": len(clean),
            "share": round(len(clean) / len(eligible), 4) if eligible else None}


def to_markdown(results: list[OpResult], seconds: float, jobs: int, float64: Sequence[OpResult] = (),
                updated: Sequence[str] = ()) -> str:
    """The sweep's report; ``updated`` names the ops an ``--update`` run audited again (the rest are as stored,
    and ``seconds``/``jobs`` are the stored sweep's)."""
    counts = totals(results)
    measured = goal(results)
    lines = ["# Op coverage: PyTorch's OpInfo database through the Metal lowering", "",
             "Generated by `python -m shimkit.audit.coverage` (docs in `audit/coverage.py`): each op's first OpInfo",
             "sample as a one-op model, audited stock (`--no-plugins`) and with shimkit's plugins.",
             f"{len(results)} (op, dtype) pairs in {seconds:.0f} s with {jobs} worker(s).", ""]
    if updated:
        lines += [f"Updated since (`--update`): {len(updated)} ops audited again, "
                  + ", ".join(f"`{op}`" for op in updated) + "; the other rows are the sweep's.", ""]
    lines += [
             "## Totals", "", "| status | stock | shimkit |", "| --- | ---: | ---: |"]
    for status in STATUSES:
        lines.append(f"| {status} | {counts['stock'].get(status, 0)} | {counts['shimkit'].get(status, 0)} |")
    lines += ["", f"Of the {measured['eligible']} float32 ops that export, {measured['clean_with_shimkit']} lower "
              f"clean with shimkit ({100 * (measured['share'] or 0):.1f}%); an op that stops in `to_edge` "
              f"(pre-backend) counts as a failure.", "",
              chart_sweep({"results": [asdict(r) for r in results]}, source="<this sweep>",
                          command="python -m shimkit.audit.coverage --markdown"), "",
              "## Fixed by shimkit", ""]
    fixed = [r for r in results if r.fixed]
    lines += [f"- `{r.op}` ({r.dtype}): stock {r.stock} ({r.stock_detail})" for r in fixed] or ["(none)"]
    lines += ["", "## Worse with shimkit than stock", ""]
    regressed = [r for r in results if r.regressed]
    lines += [f"- `{r.op}` ({r.dtype}): {r.shimkit} ({r.shimkit_detail})" for r in regressed] or ["(none)"]
    lines += ["", "## What is left with shimkit, most common first", "",
              "Kernels still missing, with the ops that need them:", ""]
    needed: dict[str, list[str]] = {}
    for r in results:
        if r.shimkit == "missing":
            for kernel in r.shimkit_detail.split(", "):
                needed.setdefault(kernel, []).append(r.op)
    lines += [f"- `{kernel}` ({len(ops)}): {', '.join(f'`{o}`' for o in sorted(ops))}"
              for kernel, ops in sorted(needed.items(), key=lambda item: (-len(item[1]), item[0]))] or ["(none)"]
    lines += ["", "Stopped before the backend (`to_edge`), by reason:", ""]
    reasons: dict[str, list[str]] = {}
    for r in results:
        if r.shimkit == "pre-backend":
            reasons.setdefault(_reason(r.shimkit_detail), []).append(r.op)
    lines += [f"- {reason} ({len(ops)}): {', '.join(f'`{o}`' for o in sorted(ops))}"
              for reason, ops in sorted(reasons.items(), key=lambda item: (-len(item[1]), item[0]))] or ["(none)"]
    held = [(r.op, _held_back(r.op)) for r in results if r.shimkit != "clean" and _held_back(r.op)]
    lines += ["", "Left as they are on purpose (Inductor's Metal code for them, run on the CPU, disagrees "
              "with ATen; `plugins/metal_generated.py`):", ""]
    lines += [f"- `{op}`: {why}" for op, why in held] or ["(none)"]
    lines += ["", "## float64 computed as float32 (opt-in: `shimkit audit --float64 float32`)", "",
              "Metal has no double: by default these fail, as they should. With the opt-in "
              "(`shimkit.passes.float64`) every float64 node is computed as float32 and named in the report; "
              "the error is the largest against float64 eager:", "",
              "| op | dtype | shimkit with the opt-in | max error vs float64 eager |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.op}` | {r.dtype} | {r.shimkit} | {r.shimkit_detail.replace('max error ', '') or '-'} |"
              for r in float64] or ["| (none) | | | |"]
    lines += ["", "## Every op", "", "| op | dtype | stock | shimkit | why (shimkit, else stock) |",
              "| --- | --- | --- | --- | --- |"]
    for r in sorted(results, key=lambda r: (r.op, r.dtype)):
        why = (r.shimkit_detail or r.stock_detail).replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| `{r.op}` | {r.dtype} | {r.stock} | {r.shimkit} | {why} |")
    return "\n".join(lines) + "\n"


def _reason(detail: str) -> str:
    """A failure message without the op it names, so that failures group by kind."""
    if "is not in Core ATen opset" in detail:
        return ("not core ATen (the edge verifier rejects the op, and no plugin decomposes it before `to_edge`: "
                "`OpPlugin.pre_edge`)")
    return detail.split(":")[0] + ": " + ":".join(detail.split(":")[1:])[:80].strip() if ":" in detail else detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shimkit.audit.coverage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", default=[], metavar="PATTERN", help="fnmatch patterns of OpInfo names")
    parser.add_argument("--dtypes", default="float32", help="comma-separated, e.g. float32,float16")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op and dtype")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the coverage report as Markdown")
    parser.add_argument("--update", metavar="FILE", type=_stored_sweep,
                        help="a stored sweep's JSON: audit only the --ops again, replace their rows (and their "
                             "float64 opt-in rows) in it, and report the whole (with --json, --markdown)")
    args = parser.parse_args(argv)
    names = op_names(args.ops)
    if not names:
        parser.error(f"no OpInfo op matches {args.ops}")
    if args.jobs < 1:
        parser.error("-j must be at least 1")
    start = time.perf_counter()

    def progress(done: int, total: int, result: OpResult) -> None:
        print(f"[{done}/{total}] {result.op} {result.dtype}: stock {result.stock}, shimkit {result.shimkit}",
              file=sys.stderr, flush=True)

    results, interrupted = sweep(names, args.dtypes.split(","), args.jobs, args.timeout, progress)
    float64 = float64_opt_in(results) if not interrupted else []
    seconds = time.perf_counter() - start
    if interrupted:
        print(f"interrupted: the reports cover the {len(results)} (op, dtype) pairs finished", file=sys.stderr)
    jobs, updated = args.jobs, []
    if args.update is not None:
        stored = args.update
        print(f"{len(results)} (op, dtype) pairs audited again in {seconds:.0f} s", file=sys.stderr)
        updated = sorted(set(stored.get("updated", [])) | {r.op for r in results})
        results, float64 = updated_sweep(stored, results, float64)
        seconds, jobs = stored["seconds"], stored["jobs"]
    document = {"seconds": round(seconds, 1), "jobs": jobs, "totals": totals(results), "goal": goal(results),
                "results": [asdict(r) for r in results], "float64_opt_in": [asdict(r) for r in float64],
                **({"updated": updated} if updated else {})}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(to_markdown(results, seconds, jobs, float64, updated))
    print(json.dumps({"seconds": document["seconds"], "totals": document["totals"], "goal": document["goal"]}))
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
