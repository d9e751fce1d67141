"""What an audit found, as a JSON document (stable, versioned) and as text for a terminal.

The JSON document is the source of truth: :func:`to_json` builds it and the text renderers read only
that document, so ``--json`` and the table can never disagree. Its schema is documented in
``docs/audit.md``; a change that removes or retypes a field bumps :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

from collections import Counter
from importlib import metadata
from typing import Any

from shimkit.audit.numerics import NumericsReport
from shimkit.audit.recorder import PROXY_EXECUTOR, RUNTIME, GraphNode, KernelCall, SourceLine
from shimkit.audit.exit_status import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INCOMPLETE, EXIT_INTERRUPTED
from shimkit.audit.provenance import PRE_EDGE, Decomposed, claims
from shimkit.audit.runner import PHASES, AuditRun, Failure, ModelAudit
from shimkit.audit.targets import METAL, TARGETS, Target

SCHEMA_VERSION = 1  # additions since: "numerics", "declines", "precision", "cached", "audited_at", "renamed", "method" per model; statuses
# "wrong", "stopped"; failure "traceback", "source", "fixes"; kernel mechanism "runtime"; summary "cached", "stopped";
# numerics "ran", "reference", "skipped"; checks "float64_errors", "eager_float64_errors"

# A model's statuses: findings in the model (exit status 1), then what kept the audit from vouching for it (2).
FINDINGS = ("missing", "wrong", "stopped")
INCOMPLETE = ("unchecked", "limitation", "error", "interrupted")
MODEL_STATUSES = ("clean", *FINDINGS, *INCOMPLETE)


def upstream_provider(target: Target) -> str:
    return f"upstream {target.backend}.get_supported_fallback_kernels()"

FIX_DOC = "docs/audit.md#fixing-a-missing-kernel"
PRE_EDGE_DOC = "docs/audit.md#before-to_edge-pre-edge-decompositions"


def exit_code(run: AuditRun) -> int:
    """130 if interrupted, 2 if any model could not be audited to the end, else 1 if any model has a finding (a
    missing kernel or runtime function, wrong numbers, an op that stops at to_edge or export), else 0."""
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


# What returns the same values in a size fixed in advance, for ops whose output size depends on the data.
# (torch.nonzero_static would not do: it is not core ATen, and to_edge stops at it.)
_STATIC_FORMS = {"aten::nonzero.default": "torch.argsort(x.flatten() == 0, stable=True) lists the nonzero positions "
                                          "first, and (x != 0).sum() says how many there are"}


def _runtime_fix(kernel: KernelCall) -> str:
    op = kernel.op or "an op"
    static = _STATIC_FORMS.get(kernel.op or "", "pad the result to a size fixed in advance")
    return (f"{op} returns a tensor whose size depends on its input's values, and the program reads that size with "
            f"{kernel.name}, which ExecuTorch's Metal runtime does not provide "
            f"(backends/aoti/common_shims.h has no such function), so the program cannot load: make the size static "
            f"({static}), or define {kernel.name} in the runtime sources of a plugin's Kernel (docs/kernels.md)")


def fix_hints(kernel: KernelCall, run: AuditRun) -> list[str]:
    """What would make a missing kernel go away, from what the registry knows (blocked plugins too)."""
    if kernel.mechanism == RUNTIME:  # no op plugin's shim or decomposition is looked up by this name
        return [_runtime_fix(kernel)]
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


def stop_fixes(failure: Failure, run: AuditRun) -> list[str]:
    """What would let a model stopped at ``to_edge`` through: the plugins that decompose the op before ``to_edge``
    (``OpPlugin.pre_edge``) or let it through (``generated_on``), blocked ones too, and why each did not act; else
    the hook to write. A stop at export comes with its fixes (no plugin acts before export)."""
    if failure.phase != "to_edge" or failure.op is None:
        return list(failure.fixes)
    op, device = failure.op, run.target.device
    hints: list[str] = []
    for entry in run.registry.op_plugins(include_blocked=True):
        plugin = entry.record
        what = f"plugin {plugin.name!r} ({entry.source.describe()})"
        if op in plugin.pre_edge and plugin.decomposes_on(device):
            offer = f"{what} decomposes {op} before to_edge (pre_edge)"
        elif device in plugin.generated_on.get(op, ()):
            offer = f"{what} lets {op} through to_edge ({device}'s code generator compiles it: generated_on)"
        elif op in plugin.pre_edge:
            hints.append(f"{what} decomposes {op} before to_edge on {', '.join(plugin.decomposition_devices or ())} "
                         f"only: add {device} to its decomposition_devices where the decomposition suits {device}")
            continue
        elif op in plugin.decompositions:
            hints.append(f"{what} has a decomposition of {op}, applied after to_edge, too late: list the op in its "
                         f"OpPlugin.pre_edge")
            continue
        else:
            continue
        if entry.blocked:
            hints.append(f"{offer} but is blocked: remove it from SHIMKIT_BLOCK_PLUGINS")
        elif not run.plugins:
            hints.append(f"{offer}: audit without --no-plugins to use it")
        else:
            hints.append(f"{offer}, yet to_edge met it: the decomposition declined this node (the model's declines "
                         f"say why) or a later decomposition made the op again")
    return hints or [f"no plugin decomposes {op} before to_edge: add an OpPlugin with a decomposition of {op} into "
                     f"core ATen ops and list the op in its pre_edge, as plugins/cumprod.py does ({PRE_EDGE_DOC})"]


def _source_json(source: SourceLine) -> dict[str, Any]:
    return {"file": source.file, "line": source.line, "function": source.function, "code": source.code}


def _node_json(node: GraphNode) -> dict[str, Any]:
    source = node.source
    return {
        "name": node.name,
        "target": node.target,
        "source": None if source is None else _source_json(source),
        "stack_trace": node.stack_trace,
    }


def _provider_json(name: str, run: AuditRun) -> dict[str, Any] | None:
    if run.config is None:
        return {"plugin": None, "source": upstream_provider(run.target), "op": None, "claims": []}
    provision = run.config.provider_of(name)
    if provision is None:
        return None
    return {"plugin": provision.plugin, "source": provision.source.describe(), "op": provision.op,
            "claims": _other_claims(provision.op, provision.plugin, run)}


def _other_claims(op: str, provider: str | None, run: AuditRun) -> list[dict[str, Any]]:
    """The claims on ``op`` for this device besides ``provider``'s: the plugins left out and those blocked (a
    blocked plugin is no contestant: this is where a built-in taking over from it shows)."""
    return [claim.as_json() for claim in claims(op, run.registry, run.target.device)
            if claim.plugin != provider and claim.status != "elsewhere"]


def _decomposition_json(decomposed: Decomposed, run: AuditRun) -> dict[str, Any]:
    source = decomposed.source
    if source is None:  # the pass's own rewrite: named with the plugin that registered the pass
        spec = next((s for s in run.registry.pass_specs(include_blocked=True) if s.name == decomposed.stage), None)
        source = f"pass {decomposed.stage!r}" + (f" of {spec.source.describe()}" if spec is not None else "")
    return {"op": decomposed.op, "stage": decomposed.stage, "plugin": decomposed.plugin, "source": source,
            "nodes": [_node_json(n) for n in decomposed.nodes],
            "claims": _other_claims(decomposed.op, decomposed.plugin, run)}


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
    entry = {
        "name": audit.name,
        "method": audit.method,
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
            "source": None if failure.source is None else _source_json(failure.source),
            "fixes": stop_fixes(failure, run) if failure.kind == "stopped" else [],
            "traceback": failure.traceback[-6000:],
        },
        "timings_s": timings,
        "numerics": _numerics_json(audit.numerics),
        "declines": [{"op": d.op, "node": d.node, "where": d.where, "reason": d.reason} for d in audit.declines],
        "precision": [{"op": c.op, "node": c.node, "where": c.where, "change": "float64 computed as float32"}
                      for c in audit.precision],
        "decompositions": [_decomposition_json(d, run) for d in audit.decompositions],
        "cached": False,
    }
    # Findings under the user's names; the renaming itself is listed as it was made.
    entry = {**audit.renaming.restore(entry), "name": audit.name}
    entry["renamed"] = [{"segment": segment, "as": stand_in,
                         "names": [{"kind": r.kind, "name": r.name, "as": r.stand_in} for r in names]}
                        for segment, stand_in, names in audit.renaming.by_segment()]
    return entry


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
        "skipped": [{"sizes": skipped.sizes, "reason": skipped.reason} for skipped in report.skipped],
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
    if statuses & set(INCOMPLETE):
        return EXIT_INCOMPLETE
    return EXIT_FINDINGS if statuses & set(FINDINGS) else EXIT_CLEAN


def document_of(models: list[dict[str, Any]], *, plugins: bool, interrupted: bool = False,
                target: Target = METAL) -> dict[str, Any]:
    """The JSON report for ``models`` (each as :func:`to_json` writes it), summary and status computed
    from them: one run's, or several merged (``shimkit merge``, ``-j``)."""
    counts = {status: sum(m["status"] == status for m in models) for status in MODEL_STATUSES}
    code = exit_code_of(models, interrupted)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "shimkit audit",
        "versions": {name: _version(name) for name in ("shimkit", "torch", "executorch")},
        "backend": target.backend,
        "device": target.device,
        "plugins": plugins,
        # "missing" names every exit status 1 (any finding), as it did before stops and wrong numbers were findings.
        "status": {EXIT_CLEAN: "clean", EXIT_FINDINGS: "missing", EXIT_INCOMPLETE: "incomplete",
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


def _line_text(source: dict[str, Any]) -> str:
    code = f": {source['code']}" if source["code"] else ""
    return f"{source['file']}:{source['line']} in {source['function']}{code}"


def _source_text(node: dict[str, Any]) -> str:
    source = node["source"]
    if source is None:
        return f"{node['name']} ({node['target']}): no source line (the node was created by a pass)"
    return f"{node['name']} ({node['target']}) at {_line_text(source)}"


def _provided_by(provider: dict[str, Any] | None) -> str:
    if provider is None:
        return "?"
    return f"plugin {provider['plugin']!r} ({provider['source']})" if provider["plugin"] else provider["source"]


def _claims_text(found: Any) -> list[str]:
    """The other claims on what a line above provides: who lost it and why, who is blocked."""
    return [f"      also claimed by {c['plugin']!r} ({c['source']}, priority {c['priority']}), offering "
            f"{', '.join(c['offers'])}: {c['status']} ({c['why']})" for c in found]


def render_model(model: dict[str, Any]) -> str:
    """One model's kernels, providers, missing kernels with nodes and fixes, or why it stopped."""
    cached = (f" (from the audit cache: audited {when_audited(model['audited_at'])})" if model.get("audited_at")
              else " (from the audit cache)") if model.get("cached") else ""
    lines = [f"{model['name']}: {model['status'].upper()}{cached}"]
    for renamed in model.get("renamed", ()):  # reports written before the field have none
        kinds = Counter(name["kind"] for name in renamed["names"])
        held = ", ".join(f"{count} {kind}{'s' if count > 1 else ''}" for kind, count in kinds.items())
        lines.append(f"  renamed {renamed['segment']!r} as {renamed['as']} in {held}: generated code cannot carry it "
                     f"(findings are under the model's own names)")
    width = max((len(k["name"]) for k in model["kernels"]), default=0)
    for kernel in model["kernels"]:
        if kernel["status"] == "supported":
            provider = kernel["provider"]
            lines.append(f"  {kernel['name']:<{width}}  {kernel['mechanism']:<14}  {_provided_by(provider)}")
            lines += _claims_text(provider.get("claims", ()) if provider else ())
        else:
            lines.append(f"  {kernel['name']:<{width}}  {kernel['mechanism']:<14}  MISSING")
    for decomposed in model.get("decompositions", ()):  # reports written before the field have none
        if decomposed["stage"] == PRE_EDGE:
            when = ", before to_edge"
        elif decomposed["source"].startswith(f"pass {decomposed['stage']!r}"):  # the source names the pass already
            when = ""
        else:
            when = f", in pass {decomposed['stage']!r}"
        lines.append(f"  decomposed {decomposed['op']} by {_provided_by(decomposed)}{when}")
        lines += [f"    at {_source_text(node)}" for node in decomposed["nodes"]]
        lines += _claims_text(decomposed["claims"])
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
        label = {"stopped": "stopped (a finding in the model)",
                 "limitation": "audit limitation (lowering ran real work on the fake mps device)",
                 "interrupted": "interrupted (the models after it were not audited)"}.get(
                     failure["kind"], "audit could not run")
        message = failure["message"].replace("\n", "\n      ")
        lines.append(f"  {label}, during {failure['phase']}: {message}")
        if failure["op"]:
            lines.append(f"    op {failure['op']}")
        if failure["node"]:
            lines.append(f"    at {_source_text(failure['node'])}")
        elif failure.get("source"):  # reports written before the field have none
            lines.append(f"    at {_line_text(failure['source'])}")
        for fix in failure.get("fixes", ()):
            lines.append(f"    fix: {fix}")
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
        for skipped in numerics.get("skipped", ()):
            sizes = ", ".join(f"{k}={v}" for k, v in skipped["sizes"].items())
            lines.append(f"  numerics at {sizes}: not run: {skipped['reason']}")
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
               f"missing kernels, {summary['wrong']} wrong numbers, {summary.get('stopped', 0)} stopped at an op, "
               f"{summary['unchecked']} numerics unchecked, "
               f"{summary['limitation']} audit limitations, "
               f"{summary['error']} error{'' if summary['error'] == 1 else 's'}")
    if summary.get("cached"):
        out.append(f"{summary['cached']} of them answered from the audit cache (--no-cache audits afresh)")
    if summary["missing_kernels"]:
        out.append(f"missing: {', '.join(summary['missing_kernels'])}")
    return "\n".join(out)


def render_conflicts(conflicts: list[dict[str, Any]]) -> str:
    """Every contested claim (``plugin_conflicts``): what, who won and why, who was left out."""
    lines = ["plugin conflicts (claims several active plugins made; the winner serves every model):"]
    for conflict in conflicts:
        left_out = ", ".join(map(repr, conflict["left_out"]))
        why = f": {conflict['why']}" if conflict.get("why") else f" (by {conflict['settled_by']})"
        lines.append(f"  {conflict['what']} on {conflict['device']}: {conflict['winner']!r} wins over {left_out}{why}")
    return "\n".join(lines)


def render_text(document: dict[str, Any]) -> str:
    sections = [render_model(m) for m in document["models"]]
    if len(document["models"]) > 1:
        sections.append(render_table(document))
    if document.get("plugin_conflicts"):  # the command's report has them; to_json's has no registry-wide part
        sections.append(render_conflicts(document["plugin_conflicts"]))
    return "\n\n".join(sections)


def when_audited(audited_at: str) -> str:
    """``2026-11-27T14:32:10+00:00`` as ``2026-11-27 14:32 UTC``."""
    return audited_at[:16].replace("T", " ") + " UTC"
