"""Which plugin provided what in an audit, and why that one: the decompositions applied to a model's nodes, every
plugin's claim on an op (won, left out, blocked, not for this device) and how a contest was settled.

The registry settles who provides an op on a device (:func:`~shimkit.registry.derive.derive_backend_config`); this
module says it back to the user: the report's provenance (``shimkit audit``'s text, Markdown and JSON) and
``shimkit audit --explain OP``. A plugin blocked with ``SHIMKIT_BLOCK_PLUGINS`` is no contestant, so a built-in
taking over from it is no contest either: its claim is listed, blocked, next to the one that served the op.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from shimkit.audit.recorder import GraphNode, graph_node

PRE_EDGE = "pre_edge"  # the stage of decompositions applied before to_edge (OpPlugin.pre_edge)
IN_PLACE = "plugin_decompositions"  # the pass applying plugin decompositions, the backend's own table after them
# How the registry settles a tie (shimkit.registry.derive._pick), said once for every contest settled by order.
ORDER = ("equal priorities go by load order: built-ins first, then entry points by entry-point and distribution "
         "name, then plugins registered from code")


@dataclass
class Decomposed:
    """An op decomposed in a model's lowering: by which op plugin (``plugin`` and ``source``), else by the backend's
    table (``plugin`` ``None``, ``source`` naming it) or by the pass itself (both ``None``: the report names the
    plugin that registered the pass); at which stage (:data:`PRE_EDGE` or the pass), where."""

    op: str
    stage: str
    plugin: str | None
    source: str | None
    nodes: list[GraphNode] = field(default_factory=list)


@contextlib.contextmanager
def recording_decompositions() -> Iterator[list[tuple[str, str, GraphNode, Any]]]:
    """``(pass, op, node, decomposition)`` for every node a shimkit pass decomposes in the block.

    ``DecomposeInPlace`` tries the plugin's decomposition, then the backend's own table where it declines; the
    one whose trace succeeded is the one spliced in, so it is noted where the trace returns."""
    from shimkit.passes.decompose import observing_decompositions
    from shimkit.registry.ops import canonical_op_name

    applied: list[tuple[str, str, GraphNode, Any]] = []

    def note(pass_name: str, op: Any, node: Any, decomposition: Any) -> None:
        applied.append((pass_name, canonical_op_name(op), graph_node(node), decomposition))

    with observing_decompositions(note):
        yield applied


def decompositions_applied(applied: list[tuple[str, str, GraphNode, Any]], config: Any,
                           backend: str) -> list[Decomposed]:
    """What :func:`recording_decompositions` saw, each decomposition attributed to the plugin that registered it
    (``config``'s winner for the op) or to the backend's table or the pass itself, merged by op, stage and author."""
    providers = {id(p.decomposition): p for p in config.capabilities.decompositions.values()}
    merged: dict[tuple[str, str, str | None, str | None], Decomposed] = {}
    for stage, op, node, decomposition in applied:
        provision = providers.get(id(getattr(decomposition, "__wrapped__", decomposition)))
        if provision is not None:
            plugin, source = provision.plugin, provision.source.describe()
        elif stage == IN_PLACE:  # its fallback: what the stock backend decomposes
            plugin, source = None, f"upstream {backend}.get_decomposition_table()"
        else:  # a pass's own rewrite (complex_pairs: ATen's composite of an op on complex values)
            plugin, source = None, None
        entry = merged.setdefault((op, stage, plugin, source), Decomposed(op, stage, plugin, source))
        if node.name not in {n.name for n in entry.nodes}:
            entry.nodes.append(node)
    return list(merged.values())


@dataclass(frozen=True)
class Claim:
    """One plugin's claim on an op on a device: what it offers (``offers``), and whether it ``provides`` the op,
    was ``left out`` (another won), is ``blocked``, or offers nothing on this device (``elsewhere``)."""

    plugin: str
    source: str
    priority: int
    offers: tuple[str, ...]
    status: str
    why: str

    def as_json(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "source": self.source, "priority": self.priority, "offers": list(self.offers),
                "status": self.status, "why": self.why}

    def describe(self) -> str:
        return (f"{self.plugin!r} ({self.source}, priority {self.priority}) offers {', '.join(self.offers)}: "
                f"{self.status} ({self.why})")


def _offers(plugin: Any, op: str, device: str) -> tuple[list[str], list[str]]:
    """What ``plugin`` offers for ``op`` on ``device``, and on other devices only."""
    here: list[str] = []
    elsewhere: list[str] = []
    for shim in (s for s in plugin.shims if s.op == op):
        kernel = f" with kernel {shim.kernel.name!r}" if shim.kernel is not None else ""
        (here if shim.device == device else elsewhere).append(f"{shim.device} shim {shim.symbol}{kernel}")
    if op in plugin.decompositions:
        what = "decomposition before to_edge (pre_edge)" if op in plugin.pre_edge else "decomposition"
        if plugin.decomposes_on(device):
            here.append(what)
        else:
            elsewhere.append(f"{what} on {', '.join(plugin.decomposition_devices or ())}")
    if op in plugin.eliminated_by:
        here.append(f"pass {plugin.eliminated_by[op]!r} removes it")
    generated = plugin.generated_on.get(op, ())
    if device in generated:
        here.append(f"{device}'s code generator compiles it (generated_on)")
    elif generated:
        elsewhere.append(f"compiled by the code generator of {', '.join(generated)} (generated_on)")
    return here, elsewhere


def _settled(winner: str, losers: list[str], priorities: dict[str, int]) -> str:
    lower = [f"{name!r} ({priorities[name]})" for name in losers if priorities[name] < priorities[winner]]
    if len(lower) == len(losers):
        return f"its priority {priorities[winner]} is higher than that of {', '.join(lower)}"
    return ORDER


def claims(op: str, registry: Any, device: str) -> list[Claim]:
    """Every registered plugin's claim on ``op`` for ``device`` (blocked plugins too), the provider first. A shim
    wins over a decomposition (decompositions apply where the device has no shim); among shims, and among
    decompositions, the highest priority wins, then load order."""
    config = registry.backend_config(device)
    capabilities = config.capabilities
    entries = registry.op_plugins(include_blocked=True)
    priorities = {e.name: e.record.priority for e in entries}
    shim = capabilities.shims.get(op)
    decomposition = None if shim is not None else capabilities.decompositions.get(op)
    elimination = capabilities.eliminations.get(op)
    found: list[Claim] = []
    for entry in entries:
        plugin = entry.record
        here, elsewhere = _offers(plugin, op, device)
        if not here and not elsewhere:
            continue
        source = entry.source.describe()
        if entry.blocked:
            status, why = "blocked", "SHIMKIT_BLOCK_PLUGINS names it"
        elif not here:
            status, why = "elsewhere", f"it offers nothing for {device}"
        elif shim is not None and shim.plugin == plugin.name:
            status, why = "provides", _why_won(shim.plugin, f"the {device} shim for {op}", config, priorities)
        elif decomposition is not None and decomposition.plugin == plugin.name:
            status, why = "provides", _why_won(decomposition.plugin, f"the decomposition of {op}", config, priorities)
        elif elimination is not None and elimination.plugin == plugin.name and shim is None and decomposition is None:
            status, why = "provides", f"pass {elimination.eliminated_by!r} removes the op"
        elif device in plugin.generated_on.get(op, ()) and shim is None and decomposition is None:
            status, why = "provides", f"{device}'s code generator compiles the op"
        elif shim is not None and not any(o.startswith(f"{device} shim") for o in here):
            status, why = "left out", f"the {device} shim of {shim.plugin!r} wins over a decomposition"
        else:
            winner = shim or decomposition
            status = "left out"
            why = (f"{winner.plugin!r} wins: {_settled(winner.plugin, [plugin.name], priorities)}" if winner
                   else "its claim is not in this device's configuration (see `shimkit plugins` for problems)")
        found.append(Claim(plugin.name, source, plugin.priority, tuple(here or elsewhere), status, why))
    return sorted(found, key=lambda c: c.status != "provides")


def _why_won(winner: str, what: str, config: Any, priorities: dict[str, int]) -> str:
    contest = next((c for c in config.contests if c.what == what), None)
    if contest is None:
        return "the only active claimant"
    return f"contested by {', '.join(map(repr, contest.left_out))}: " + (
        _settled(winner, list(contest.left_out), priorities) if contest.settled_by == "priority" else ORDER)


def contest_why(contest: dict[str, Any], registry: Any) -> str:
    """Why ``contest`` (as ``Contest.as_json`` writes it) went to its winner."""
    priorities = {e.name: e.record.priority for e in registry.op_plugins(include_blocked=True)}
    if contest["settled_by"] == "priority":
        return _settled(contest["winner"], contest["left_out"], priorities)
    return ORDER


def explanation(op: str, registry: Any, devices: tuple[str, ...]) -> dict[str, Any]:
    """:func:`explain` as JSON (``--explain OP --json``): per device, the providing plugin and every claim."""
    per_device = {}
    for device in devices:
        found = claims(op, registry, device)
        provider = next((c.plugin for c in found if c.status == "provides"), None)
        per_device[device] = {"provider": provider, "claims": [c.as_json() for c in found]}
    return {"op": op, "devices": per_device}


def explain(op: str, registry: Any, devices: tuple[str, ...]) -> str:
    """``shimkit audit --explain OP``: per device, every plugin's claim on ``op`` and which one provides it."""
    lines = [op]
    for device in devices:
        found = claims(op, registry, device)
        provider = next((c for c in found if c.status == "provides"), None)
        if provider is not None:
            lines.append(f"  on {device}: {provider.plugin!r} provides it ({provider.why})")
        else:
            lines.append(f"  on {device}: no active plugin provides it (the backend's own kernels or decompositions, "
                         f"if any, serve it)")
        lines += [f"    {claim.describe()}" for claim in found]
    if not any(line.startswith("    ") for line in lines):
        lines.append("  no plugin claims it, on any device")
    return "\n".join(lines) + "\n"
