"""What an audit found, as a JSON document (stable, versioned) and as text for a terminal.

The JSON document is the source of truth: :func:`to_json` builds it and the text renderers read only
that document, so ``--json`` and the table can never disagree. Its schema is documented in
``docs/audit.md``; a change that removes or retypes a field bumps :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from shimkit.audit.numerics import NumericsReport
from shimkit.audit.recorder import PROXY_EXECUTOR, GraphNode, KernelCall
from shimkit.audit.exit_status import EXIT_CLEAN, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_MISSING
from shimkit.audit.runner import PHASES, AuditRun, ModelAudit
from shimkit.audit.targets import METAL, TARGETS, Target

SCHEMA_VERSION = 1  # additions since: "numerics", "declines", "precision", "cached", "audited_at" per model; status
# "wrong"; failure "traceback"; summary "cached"; numerics "ran", "reference"; checks "float64_errors", "eager_float64_errors"


def upstream_provider(target: Target) -> str:
    return f"upstream {target.backend}.get_supported_fallback_kernels()"

FIX_DOC = "docs/audit.md#fixing-a-missing-kernel"


def exit_code(run: AuditRun) -> int:
    """130 if interrupted, 2 if any model could not be audited to the end, else 1 if any kernel is
    missing or any numerics check failed, else 0."""
    return exit_code_of([{"status": m.status} for m in run.models], run.interrupted)


def _op_candidates(kernel: KernelCall) -> list[str]:
    """The op names a plugin would use for this kernel: the recorded overload and its functional
    form (Inductor calls ``addmm.out`` for a graph's ``addmm.default``)."""
    names = [kernel.op] if kernel.op else []
    if not names and "::" in kernel.name and not kernel.name.startswith("at::"):
        names = [kernel.name]
    functional = [n.rsplit(".", 1)[0] + ".default" for n in names if not n.endswith(".default")]
    return list(dict.fromkeys(names + functional))


# Ops whose result the device's runtime cannot hold, whatever a plugin ships.
_NO_KERNEL_CAN = {
    ("mps", "aten::view_as_complex.default"):
        "a complex value is a graph output here, and ExecuTorch's Metal runtime has no complex dtype (its "
        "tensors are real or integer), so no kernel can return it: return torch.view_as_real(...) of it "
        "instead; the complex_pairs pass carries everything before it as real pairs (docs/complex.md)",
}


def fix_hints(kernel: KernelCall, run: AuditRun) -> list[str]:
    """What would make a missing kernel go away, from what the registry knows (blocked plugins too)."""
    ops = _op_candidates(kernel)
    hints: list[str] = []
    active_passes = set(run.config.pass_names) if run.config is not None else set()
    for entry in run.registry.op_plugins(include_blocked=True):
        plugin = entry.record
        covered = [op for op in ops if op in plugin.ops]
        if not covered:
            continue
        op = covered[0]
        offers = []
        shims = [s for s in plugin.shims_for(run.target.device) if s.op == op]
        if shims:
            offers.append(f"a {run.target.device} shim ({shims[0].symbol})")
        if op in plugin.decompositions and plugin.decomposes_on(run.target.device):
            offers.append("a decomposition")
        if op in plugin.eliminated_by:
            offers.append(f"pass {plugin.eliminated_by[op]!r} that removes it")
        if not offers:
            continue
        what = f"plugin {plugin.name!r} ({entry.source.describe()}) has {' and '.join(offers)} for {op}"
        if entry.blocked:
            hints.append(f"{what} but is blocked: remove it from SHIMKIT_BLOCK_PLUGINS")
        elif not run.plugins:
            hints.append(f"{what}: audit without --no-plugins to use it")
        elif shims and kernel.name not in shims[0].names:
            hints.append(f"{what}, but not under the name Inductor records here ({kernel.name}): "
                         f"add it to the shim's recorded_names")
        elif op in plugin.eliminated_by and plugin.eliminated_by[op] not in active_passes:
            hints.append(f"{what}, but no active plugin provides pass {plugin.eliminated_by[op]!r}")
        elif op in plugin.eliminated_by:
            hints.append(f"{what}, yet the op reached Inductor: the pass left this node in place (it keeps "
                         f"ops whose removal would change meaning, e.g. a view of a mutated tensor)")
        elif op in plugin.decompositions and plugin.decomposes_on(run.target.device):
            hints.append(f"{what}, yet Inductor still calls {kernel.name}: it re-creates the op after "
                         f"the decomposition (e.g. a post-grad fusion); a shim or a post-grad pass is needed")
    if not hints:
        op = ops[0] if ops else kernel.name
        if (run.target.device, op) in _NO_KERNEL_CAN:
            hints.append(_NO_KERNEL_CAN[run.target.device, op])
        elif kernel.mechanism == PROXY_EXECUTOR:
            hints.append(f"{op} has no c-shim at all, so Inductor routes it to the proxy executor, which "
                         f"the libtorch-free runtime lacks: add an OpPlugin with a decomposition into "
                         f"supported ops, or a pass that removes it ({FIX_DOC})")
        else:
            hints.append(f"no plugin covers {op}: add an OpPlugin with a decomposition into supported "
                         f"ops, or a {run.target.device} Shim with a kernel ({FIX_DOC})")
    return hints


def _node_json(node: GraphNode) -> dict[str, Any]:
    source = node.source
    return {
        "name": node.name,
        "target": node.target,
        "source": None if source is None else {
            "file": source.file, "line": source.line, "function": source.function, "code": source.code},
        "stack_trace": node.stack_trace,
    }


def _provider_json(name: str, run: AuditRun) -> dict[str, Any] | None:
    if run.config is None:
        return {"plugin": None, "source": upstream_provider(run.target), "op": None}
    provision = run.config.provider_of(name)
    if provision is None:
        return None
    return {"plugin": provision.plugin, "source": provision.source.describe(), "op": provision.op}


def _model_json(audit: ModelAudit, run: AuditRun) -> dict[str, Any]:
    kernels = []
    for kernel in audit.kernels:
        supported = kernel.name in audit.supported
        kernels.append({
            "name": kernel.name,
            "mechanism": kernel.mechanism,
            "op": kernel.op,
            "status": "supported" if supported else "missing",
            "provider": _provider_json(kernel.name, run) if supported else None,
            "nodes": [_node_json(n) for n in kernel.graph_nodes],
            "fixes": [] if supported else fix_hints(kernel, run),
        })
    failure = audit.failure
    timings = {phase: round(audit.timings.get(phase, 0.0), 4) for phase in PHASES}
    timings["total"] = round(sum(timings.values()), 4)
    return {
        "name": audit.name,
        "status": audit.status,
        "partitions": audit.partitions,
        "kernels": kernels,
        "missing": sorted(k.name for k in audit.missing),
        "upstream_errors": list(audit.upstream_errors),
        "failure": None if failure is None else {
            "kind": failure.kind,
            "phase": failure.phase,
            "message": failure.message,
            "op": failure.op,
            "node": None if failure.node is None else _node_json(failure.node),
            "traceback": failure.traceback[-6000:],
        },
        "timings_s": timings,
        "numerics": _numerics_json(audit.numerics),
        "declines": [{"op": d.op, "node": d.node, "where": d.where, "reason": d.reason} for d in audit.declines],
        "precision": [{"op": c.op, "node": c.node, "where": c.where, "change": "float64 computed as float32"}
                      for c in audit.precision],
        "cached": False,
    }


def _numerics_json(report: NumericsReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "ok": report.ok,
        "ran": report.ran,
        "unavailable": report.unavailable,
        "reference": report.reference,
        "checks": [{"sizes": c.sizes, "max_errors": c.max_errors, "ok": c.ok, "error": c.error,
                    "float64_errors": c.float64_errors, "eager_float64_errors": c.eager_float64_errors}
                   for c in report.checks],
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def to_json(run: AuditRun) -> dict[str, Any]:
    return document_of([_model_json(m, run) for m in run.models], plugins=run.plugins, interrupted=run.interrupted,
                       target=run.target)


def target_of(document: dict[str, Any]) -> Target:
    """The target a JSON report was made for (reports without the field are Metal's)."""
    backend = document.get("backend", METAL.backend)
    return next((t for t in TARGETS.values() if t.backend == backend), METAL)


def exit_code_of(models: list[dict[str, Any]], interrupted: bool = False) -> int:
    """:func:`exit_code` from the models of a JSON report."""
    if interrupted:
        return EXIT_INTERRUPTED
    statuses = {m["status"] for m in models}
    if statuses & {"limitation", "error", "unchecked", "interrupted"}:
        return EXIT_INCOMPLETE
    return EXIT_MISSING if statuses & {"missing", "wrong"} else EXIT_CLEAN


def document_of(models: list[dict[str, Any]], *, plugins: bool, interrupted: bool = False,
                target: Target = METAL) -> dict[str, Any]:
    """The JSON report for ``models`` (each as :func:`to_json` writes it), summary and status computed
    from them: one run's, or several merged (``shimkit audit merge``, ``-j``)."""
    counts = {status: sum(m["status"] == status for m in models)
              for status in ("clean", "missing", "wrong", "unchecked", "limitation", "error", "interrupted")}
    code = exit_code_of(models, interrupted)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "shimkit audit",
        "versions": {name: _version(name) for name in ("shimkit", "torch", "executorch")},
        "backend": target.backend,
        "device": target.device,
        "plugins": plugins,
        "status": {EXIT_CLEAN: "clean", EXIT_MISSING: "missing", EXIT_INCOMPLETE: "incomplete",
                   EXIT_INTERRUPTED: "interrupted"}[code],
        "exit_code": code,
        "summary": {
            "models": len(models),
            **counts,
            "missing_kernels": sorted({name for m in models for name in m["missing"]}),
            "cached": sum(bool(m.get("cached")) for m in models),
        },
        "models": models,
    }


def _source_text(node: dict[str, Any]) -> str:
    source = node["source"]
    if source is None:
        return f"{node['name']} ({node['target']}): no source line (the node was created by a pass)"
    code = f": {source['code']}" if source["code"] else ""
    return f"{node['name']} ({node['target']}) at {source['file']}:{source['line']} in {source['function']}{code}"


def render_model(model: dict[str, Any]) -> str:
    """One model's kernels, providers, missing kernels with nodes and fixes, or why it stopped."""
    cached = (f" (from the audit cache: audited {when_audited(model['audited_at'])})" if model.get("audited_at")
              else " (from the audit cache)") if model.get("cached") else ""
    lines = [f"{model['name']}: {model['status'].upper()}{cached}"]
    width = max((len(k["name"]) for k in model["kernels"]), default=0)
    for kernel in model["kernels"]:
        if kernel["status"] == "supported":
            provider = kernel["provider"]
            by = (provider["plugin"] or "upstream") if provider else "?"
            lines.append(f"  {kernel['name']:<{width}}  {kernel['mechanism']:<14}  {by}")
        else:
            lines.append(f"  {kernel['name']:<{width}}  {kernel['mechanism']:<14}  MISSING")
    for kernel in model["kernels"]:
        if kernel["status"] != "missing":
            continue
        lines.append(f"  missing {kernel['name']}" + (f" (op {kernel['op']})" if kernel["op"] else ""))
        for node in kernel["nodes"]:
            lines.append(f"    from {_source_text(node)}")
        for fix in kernel["fixes"]:
            lines.append(f"    fix: {fix}")
    failure = model["failure"]
    if failure is not None:
        label = {"limitation": "audit limitation (lowering ran real work on the fake mps device)",
                 "interrupted": "interrupted (the models after it were not audited)"}.get(
                     failure["kind"], "audit could not run")
        message = failure["message"].replace("\n", "\n      ")
        lines.append(f"  {label}, during {failure['phase']}: {message}")
        if failure["op"]:
            lines.append(f"    op {failure['op']}")
        if failure["node"]:
            lines.append(f"    at {_source_text(failure['node'])}")
    for decline in model["declines"]:
        lines.append(f"  declined: {decline['op']} at {decline['where']}: {decline['reason']}")
    for change in model.get("precision", ()):
        lines.append(f"  precision: float64 computed as float32 at {change['where']}")
    numerics = model["numerics"]
    if numerics is not None:
        if numerics.get("ran") == "program":
            lines.append("  numerics of the generated Metal program, executed on the CPU:")
        if numerics["unavailable"]:
            lines.append(f"  numerics: not checked: {numerics['unavailable']}")
        for check in numerics["checks"]:
            sizes = ", ".join(f"{k}={v}" for k, v in check["sizes"].items()) or "example sizes"
            errors = ", ".join(f"{e:.2g}" for e in check["max_errors"])
            verdict = "ok" if check["ok"] else f"WRONG: {check['error']}"
            float64 = ""
            if check.get("float64_errors"):
                distances = lambda values: ", ".join("-" if e is None else f"{e:.2g}" for e in values)  # noqa: E731
                float64 = (f"; from float64 [{distances(check['float64_errors'])}], eager's "
                           f"[{distances(check['eager_float64_errors'])}]")
            lines.append(f"  numerics at {sizes}: max error per output [{errors}]{float64} {verdict}")
    if failure is None and model["partitions"] == 0:
        lines.append("  (the partitioner delegated nothing: no part of this model would run on the backend)")
    elif not model["kernels"] and failure is None:
        lines.append("  (no c-shim or proxy-executor kernels: everything became generated device code)")
    return "\n".join(lines)


def render_table(document: dict[str, Any]) -> str:
    """The multi-model summary: one row per model and a total line."""
    header = ("model", "status", "kernels", "missing", *PHASES, "total")
    rows = []
    for model in document["models"]:
        timings = model["timings_s"]
        status = model["status"] + (" (cached)" if model.get("cached") else "")
        rows.append((model["name"], status, str(len(model["kernels"])), str(len(model["missing"])),
                     *(f"{timings[p]:.2f}" for p in PHASES), f"{timings['total']:.2f}"))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    numeric = set(range(2, len(header)))

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    summary = document["summary"]
    out = [line(header), line(tuple("-" * w for w in widths)), *map(line, rows)]
    mode = "shimkit plugins" if document["plugins"] else "stock upstream (--no-plugins)"
    out.append("")
    out.append(f"{summary['models']} models with {mode}: {summary['clean']} clean, {summary['missing']} "
               f"missing kernels, {summary['wrong']} wrong numbers, {summary['unchecked']} numerics unchecked, "
               f"{summary['limitation']} audit limitations, "
               f"{summary['error']} error{'' if summary['error'] == 1 else 's'}")
    if summary.get("cached"):
        out.append(f"{summary['cached']} of them answered from the audit cache (--no-cache audits afresh)")
    if summary["missing_kernels"]:
        out.append(f"missing: {', '.join(summary['missing_kernels'])}")
    return "\n".join(out)


def render_text(document: dict[str, Any]) -> str:
    sections = [render_model(m) for m in document["models"]]
    if len(document["models"]) > 1:
        sections.append(render_table(document))
    return "\n\n".join(sections)


def when_audited(audited_at: str) -> str:
    """``2026-11-27T14:32:10+00:00`` as ``2026-11-27 14:32 UTC``."""
    return audited_at[:16].replace("T", " ") + " UTC"
