"""Derive a backend's configuration from the active plugins.

Everything upstream writes by hand — ``get_supported_fallback_kernels()``, ``get_decomposition_table()``,
``aot_inductor.custom_ops_to_c_shims``, ``get_custom_passes()`` and the runtime's kernel source list —
is computed here from the registered records, so adding an op never means editing core files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import torch

from shimkit._ordering import OrderingCycle, prerequisites_of, stable_order
from shimkit.csrc.build import MSL_ADAPTER, sdk_sources
from shimkit.registry.errors import PluginConflictError, declining_as_not_implemented
from shimkit.registry.entries import PluginSource, Registered
from shimkit.registry.ops import canonical_op_name, try_resolve_op
from shimkit.registry.records import DEVICES, Kernel, OpPlugin, PassSpec, Shim


class PluginSet(Protocol):
    """What the derivation reads of a registry and reports to it (``PluginRegistry`` is one)."""

    strict: bool

    def op_plugins(self, include_blocked: bool = False) -> list[Registered[OpPlugin]]: ...

    def pass_specs(self, include_blocked: bool = False) -> list[Registered[PassSpec]]: ...

    def load_index(self, source: PluginSource) -> int: ...

    def report_conflict(self, loser: PluginSource, message: str) -> None: ...

    def report_problem(self, source: PluginSource, stage: str, message: str) -> None: ...


@dataclass(frozen=True)
class Provision:
    """One way an op is handled on a device, and the plugin that provides it."""

    op: str
    plugin: str
    source: PluginSource
    shim: Shim | None = None
    decomposition: Callable[..., Any] | None = None
    eliminated_by: str | None = None
    pre_edge: bool = False

    @property
    def kind(self) -> str:
        return "shim" if self.shim else "decomposition" if self.decomposition else "pass"


@dataclass(frozen=True)
class Contest:
    """Several plugins claimed one thing on a device, and how it was settled.

    ``what`` names the claim (``"the mps shim for aten::erfinv.default"``), ``winner`` the plugin that
    provides it, ``left_out`` the others, ``settled_by`` ``"priority"`` (the winner's was higher) or
    ``"order"`` (equal priorities: built-ins first, then entry points by entry-point name and distribution
    name, then plugins registered from code; never the order packages were installed or discovered in)."""

    what: str
    winner: str
    left_out: tuple[str, ...]
    settled_by: str

    def as_json(self, device: str) -> dict[str, Any]:
        """The contest as ``shimkit plugins --json`` and the audit report list it."""
        return {"device": device, "what": self.what, "winner": self.winner, "left_out": list(self.left_out),
                "settled_by": self.settled_by}


def _contest(what: str, winner: Provision, candidates: list[Provision],
             priorities: Mapping[str, int]) -> Contest:
    others = tuple(dict.fromkeys(c.plugin for c in candidates if c.plugin != winner.plugin))
    tied = any(priorities[name] == priorities[winner.plugin] for name in others)
    return Contest(what, winner.plugin, others, "order" if tied else "priority")


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device can do with each op, as the active plugins declare it.

    Passes receive this when they are built, so their decisions (decompose ``addmm`` or keep it) follow
    the registry instead of hard-coded lists.
    """

    device: str
    shims: Mapping[str, Provision]
    decompositions: Mapping[str, Provision]
    eliminations: Mapping[str, Provision]
    generated: frozenset[str] = frozenset()
    # SHIMKIT_STRICT_PLUGINS: a plugin's failure while lowering raises instead of being reported.
    strict: bool = False

    def has_shim(self, op: Any) -> bool:
        return canonical_op_name(op) in self.shims

    def generates(self, op: Any) -> bool:
        """Whether the device's code generator compiles ``op`` itself, and nothing here provides a shim or
        decomposition for it: a plugin says so (``OpPlugin.generated_on``), or decomposes the op but
        limits that decomposition to other devices (``OpPlugin.decomposition_devices``). CUDA's Triton
        GEMM templates compile ``addmm``, say, where Metal calls an ``addmm`` kernel.
        """
        name = canonical_op_name(op)
        return name in self.generated and name not in self.shims and name not in self.decompositions

    def keeps(self, op: Any) -> bool:
        """Whether ``op`` can reach Inductor as it is: the device has a shim for it or compiles it."""
        return self.has_shim(op) or self.generates(op)

    def shim(self, op: Any) -> Shim | None:
        provision = self.shims.get(canonical_op_name(op))
        return provision.shim if provision else None

    def decomposition(self, op: Any) -> Callable[..., Any] | None:
        """The decomposition to apply for ``op`` here: only where the device has no shim for it."""
        name = canonical_op_name(op)
        if name in self.shims:
            return None
        provision = self.decompositions.get(name)
        return provision.decomposition if provision else None


@dataclass(frozen=True)
class BackendConfig:
    """Everything a backend needs for one device, derived from the registry.

    ``fallback_kernels`` is the dict ``get_supported_fallback_kernels()`` returns, ``decomposition_table``
    maps ``OpOverload`` to decomposition (ops without a shim here), ``custom_c_shims`` is the value for
    ``aot_inductor.custom_ops_to_c_shims``, ``passes`` are the graph passes in order and
    ``post_grad_passes`` the Inductor-side ones, ``kernel_sources`` the files a runtime build compiles
    ``pre_edge_decomposition_table`` the decompositions :meth:`prepare_for_edge` applies before ``to_edge``,
    ``edge_exceptions`` the ops :meth:`edge_compile_config` lets through the edge verifier.
    """

    device: str
    capabilities: DeviceCapabilities
    fallback_kernels: Mapping[str, None]
    decomposition_table: Mapping[torch._ops.OpOverload, Callable[..., Any]]
    custom_c_shims: Mapping[torch._ops.OpOverload, list[str]]
    passes: tuple[Any, ...]
    pass_names: tuple[str, ...]
    post_grad_passes: tuple[Any, ...]
    post_grad_pass_names: tuple[str, ...]
    kernel_sources: tuple[str, ...]
    kernel_providers: Mapping[str, Provision]
    shadowed: tuple[Provision, ...] = field(default=())
    contests: tuple[Contest, ...] = field(default=())
    msl_shims: tuple[Shim, ...] = field(default=())
    pre_edge_decomposition_table: Mapping[torch._ops.OpOverload, Callable[..., Any]] = field(
        default_factory=lambda: MappingProxyType({}))
    edge_exceptions: tuple[torch._ops.OpOverload, ...] = ()
    pre_edge_passes: tuple[Any, ...] = ()

    def edge_compile_config(self, **options: Any) -> Any:
        """The ``EdgeCompileConfig`` for stock ``to_edge_transform_and_lower`` that lets through the ops
        this device's code generator compiles although they are not core ATen (``edge_exceptions``, from
        ``OpPlugin.generated_on``; ``torch.special.bessel_j0``: Inductor's Metal code has it, the edge
        verifier would stop it). ``options`` are passed on; an exception list given there is extended.

        >>> config = backend_config("mps")                                   # doctest: +SKIP
        >>> to_edge_transform_and_lower(config.prepare_for_edge(exported), partitioner=[...],
        ...                             compile_config=config.edge_compile_config())
        """
        from executorch.exir import EdgeCompileConfig

        given = list(options.pop("_core_aten_ops_exception_list", ()))
        return EdgeCompileConfig(
            _core_aten_ops_exception_list=given + [op for op in self.edge_exceptions if op not in given],
            **options)

    def prepare_for_edge(self, exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
        """``exported`` with the plugins' pre-edge decompositions applied (``OpPlugin.pre_edge``: ops the
        edge dialect rejects before any backend sees them), ready for stock ``to_edge_transform_and_lower``.
        Returned unchanged when none of those ops occurs. The ``pre_edge`` passes (``PassSpec.stage``) then
        rewrite the result in place.

        >>> config = backend_config("mps")                                   # doctest: +SKIP
        >>> exported = config.prepare_for_edge(torch.export.export(model, example_inputs))
        >>> to_edge_transform_and_lower(exported, partitioner=[MetalPartitioner(...)])
        """
        table = self.pre_edge_decomposition_table
        if table and any(node.op == "call_function" and node.target in table
                         for module in exported.graph_module.modules()
                         if isinstance(module, torch.fx.GraphModule) for node in module.graph.nodes):
            exported = exported.run_decompositions(dict(table))
        for pre_edge_pass in self.pre_edge_passes:
            pre_edge_pass(exported)
        return exported

    @property
    def elementwise_msl_shims(self) -> tuple[Shim, ...]:
        """The MSL shims dispatched by the generated entry points (their kernels have no ``launch``)."""
        return tuple(s for s in self.msl_shims if s.kernel is not None and s.kernel.msl is not None
                     and s.kernel.msl.launch is None)

    def provider_of(self, kernel_name: str) -> Provision | None:
        """Which plugin provides a kernel name as Inductor records it (``aoti_torch_mps_mm_out`` ...)."""
        return self.kernel_providers.get(kernel_name)

def _declares_msl(shim: Shim) -> bool:
    return shim.kernel is not None and shim.kernel.msl is not None


def _runtime_sources(kernels: Iterable[Kernel | None]) -> tuple[str, ...]:
    """What the runtime build compiles: each shipped kernel's runtime sources, after shimkit's SDK
    sources when any kernel uses the SDK."""
    shipped = [k for k in kernels if k is not None]
    sdk = sdk_sources() if any(k.uses_sdk for k in shipped) else []
    msl = [MSL_ADAPTER] if any(k.msl is not None for k in shipped) else []
    return tuple(dict.fromkeys([*sdk, *msl, *(path for k in shipped for path in k.runtime_paths)]))


def _pick(candidates: list[Provision], what: str, priorities: Mapping[str, int],
          registry: PluginSet) -> tuple[Provision, list[Provision]]:
    """Highest priority wins. At a tie, third-party entry points loaded after the first claimant are
    reported and left out (a broken or clashing package must not take shimkit down); any other tie
    (built-ins, plugins registered from code) is a conflict naming all of them."""
    ranked = sorted(candidates, key=lambda p: (-priorities[p.plugin], registry.load_index(p.source)))
    top = [p for p in ranked if priorities[p.plugin] == priorities[ranked[0].plugin]]
    late = [p for p in top[1:] if p.plugin != top[0].plugin]
    if late and all(p.source.kind == "entry_point" for p in late):
        for loser in late:
            registry.report_conflict(loser.source, _tie_message(what, [top[0], loser], priorities)
                                     + f"; {loser.plugin!r} is left out")
        return top[0], [p for p in ranked[1:] if p not in late]
    if late:
        raise PluginConflictError(_tie_message(what, top, priorities))
    return ranked[0], ranked[1:]


def _tie_message(what: str, claimants: list[Provision], priorities: Mapping[str, int]) -> str:
    names = " and ".join(f"{p.plugin!r} ({p.source.describe()})" for p in claimants)
    return (f"{what} is claimed by {names} at equal priority {priorities[claimants[0].plugin]}; "
            f"block one (SHIMKIT_BLOCK_PLUGINS=name) or give one a higher `priority`")


def _shim(provision: Provision) -> Shim:
    """The shim of a provision taken from the shim table (which holds only shim provisions)."""
    if provision.shim is None:
        raise TypeError(f"{provision.plugin!r} provides {provision.op} without a shim")
    return provision.shim


def _check_unique_names(entries: Sequence[Registered[Any]], kind: str) -> None:
    seen: dict[str, Registered[Any]] = {}
    for entry in entries:
        if entry.name in seen:
            other = seen[entry.name]
            raise PluginConflictError(
                f"two {kind} are named {entry.name!r}: one from {other.source.describe()}, "
                f"one from {entry.source.describe()}")
        seen[entry.name] = entry


def _order_passes(specs: list[Registered[PassSpec]]) -> list[Registered[PassSpec]]:
    """Stable topological order: registration order, moved only as ``after``/``before`` demand."""
    by_name = {s.name: s for s in specs}
    edges = prerequisites_of((s.name, s.record.after, s.record.before) for s in specs)
    try:
        names = stable_order([s.name for s in specs], edges)
    except OrderingCycle as cycle:
        raise PluginConflictError(str(cycle)) from None
    return [by_name[name] for name in names]


@functools.lru_cache(maxsize=None)
def _loaded_namespaces() -> frozenset[str]:
    return frozenset(name.split("::", 1)[0] for name in torch._C._dispatch_get_all_op_names())


def _unresolved_ops(entry: Registered[OpPlugin], registry: PluginSet) -> tuple[frozenset[str], frozenset[str]]:
    """The ops of ``entry`` that no loaded library defines, and those of them that are misnamed.

    An absent op cannot be decomposed by a graph pass, so its decomposition is left out. An op of a
    library that is not loaded here (torchao's mps ops off macOS but the 4-bit linear) is otherwise quiet, so one cross-platform
    plugin works on both; so is a built-in's op this torch release does not define (the sdpa plugin names
    mps ops of several releases, whose kernel names Inductor still records). An op a third-party plugin
    names in a loaded library that does not define it (``aten::addmmm``) is misnamed: reported by plugin
    name (raised in strict mode) and left out altogether; the rest of the plugin still works.
    """
    ops = {*entry.record.ops, *entry.record.decompositions, *(shim.op for shim in entry.record.shims)}
    absent = frozenset(op for op in ops if try_resolve_op(op) is None)
    misnamed = frozenset(op for op in absent
                         if entry.source.kind != "builtin" and op.split("::", 1)[0] in _loaded_namespaces())
    for op in sorted(misnamed):
        registry.report_problem(entry.source, "op", f"op plugin {entry.name!r} declares {op}, which "
                                                 f"{op.split('::', 1)[0]} does not define (a misspelt name, or an "
                                                 f"op of another torch release); that op of it is left out")
    return absent, misnamed


def derive_backend_config(registry: PluginSet, device: str) -> BackendConfig:
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    plugins = registry.op_plugins()
    _check_unique_names(plugins, "op plugins")
    priorities = {entry.name: entry.record.priority for entry in plugins}

    shim_candidates: dict[str, list[Provision]] = {}
    decomposition_candidates: dict[str, list[Provision]] = {}
    eliminations: dict[str, Provision] = {}
    generated: set[str] = set()
    declared_generated: set[str] = set()
    for entry in plugins:
        plugin = entry.record
        absent, misnamed = _unresolved_ops(entry, registry)
        for shim in plugin.shims_for(device):
            # A kernel name is a string Inductor may record for an op this process cannot resolve (the
            # sdpa plugin's mps ops of other releases): only a misnamed op's shim is left out.
            if shim.op not in misnamed:
                shim_candidates.setdefault(shim.op, []).append(
                    Provision(shim.op, plugin.name, entry.source, shim=shim))
        if not plugin.decomposes_on(device):
            generated.update(op for op in plugin.decompositions if op not in misnamed)
        declared_generated.update(op for op in plugin.generated_ops_on(device) if op not in misnamed)
        for op, fn in plugin.decompositions.items() if plugin.decomposes_on(device) else ():
            if op in absent:  # a decomposition pass must resolve what it decomposes
                continue
            decomposition_candidates.setdefault(op, []).append(
                Provision(op, plugin.name, entry.source, decomposition=fn, pre_edge=op in plugin.pre_edge))
        for op, pass_name in plugin.eliminated_by.items():
            eliminations.setdefault(op, Provision(op, plugin.name, entry.source, eliminated_by=pass_name))

    shadowed: list[Provision] = []
    contests: list[Contest] = []
    shims: dict[str, Provision] = {}
    for op, candidates in shim_candidates.items():
        what = f"the {device} shim for {op}"
        shims[op], lost = _pick(candidates, what, priorities, registry)
        shadowed += lost
        if len({c.plugin for c in candidates}) > 1:
            contests.append(_contest(what, shims[op], candidates, priorities))
    decompositions: dict[str, Provision] = {}
    for op, candidates in decomposition_candidates.items():
        what = f"the decomposition of {op}"
        decompositions[op], lost = _pick(candidates, what, priorities, registry)
        shadowed += lost
        if len({c.plugin for c in candidates}) > 1:
            contests.append(_contest(what, decompositions[op], candidates, priorities))

    kernel_providers: dict[str, Provision] = {}
    for op, provision in sorted(shims.items(), key=lambda item: registry.load_index(item[1].source)):
        shim = _shim(provision)
        for name in shim.names:
            other = kernel_providers.get(name)
            if other is None:
                continue
            message = (f"kernel name {name!r} on {device} is claimed for {other.op} by {other.plugin!r} "
                       f"({other.source.describe()}) and for {provision.op} by {provision.plugin!r} "
                       f"({provision.source.describe()}); C shims drop namespace and overload, so give "
                       f"one a distinct symbol")
            if provision.source.kind != "entry_point":
                raise PluginConflictError(message)
            registry.report_conflict(provision.source, f"{message}; {provision.plugin!r} is left out")
            contests.append(Contest(f"kernel name {name!r} on {device}", other.plugin, (provision.plugin,), "order"))
            del shims[op]
            break
        else:
            kernel_providers.update(dict.fromkeys(shim.names, provision))
    chosen = {op: _shim(provision) for op, provision in shims.items()}

    capabilities = DeviceCapabilities(
        device, MappingProxyType(shims), MappingProxyType(decompositions), MappingProxyType(eliminations),
        frozenset(generated | declared_generated), strict=registry.strict)

    # Tables keyed by OpOverload leave out ops no loaded library defines: they cannot be in a graph.
    decomposition_table = {}
    pre_edge_table = {}
    for op, provision in decompositions.items():
        overload = try_resolve_op(op)
        if overload is None or provision.decomposition is None:
            continue
        if provision.pre_edge:
            pre_edge_table[overload] = declining_as_not_implemented(provision.decomposition)
        elif op not in shims:
            decomposition_table[overload] = declining_as_not_implemented(provision.decomposition)
    custom_c_shims = {}
    for op, shim in chosen.items():
        overload = try_resolve_op(op)
        prototype = shim.c_prototype
        if prototype and overload is not None:
            custom_c_shims[overload] = [prototype]

    pass_entries = [p for p in registry.pass_specs() if p.record.applies_to(device)]
    _check_unique_names(pass_entries, "passes")
    built: dict[str, list[tuple[str, Any]]] = {"pre_edge": [], "graph": [], "post_grad": []}
    for pass_entry in _order_passes(pass_entries):
        spec = pass_entry.record
        try:
            built_pass = spec.factory(capabilities)
        except (Exception, SystemExit) as error:
            if pass_entry.source.kind == "builtin":
                raise
            registry.report_problem(pass_entry.source, "pass", f"pass {spec.name!r}: its factory raised "
                                                               f"{type(error).__name__}: {error}; the pass is left out")
            continue
        built[spec.stage].append((spec.name, built_pass))

    sources = _runtime_sources(shim.kernel for shim in chosen.values())
    # Only ops a plugin vouches for: an op whose decomposition is merely limited to other devices is left
    # to the edge verifier as stock leaves it.
    edge_exceptions = tuple(sorted(
        (overload for overload in map(try_resolve_op, declared_generated) if overload is not None
         and capabilities.generates(overload) and torch.Tag.core not in overload.tags), key=str))
    return BackendConfig(
        device=device,
        capabilities=capabilities,
        fallback_kernels=MappingProxyType({name: None for name in sorted(kernel_providers)}),
        decomposition_table=MappingProxyType(decomposition_table),
        pre_edge_decomposition_table=MappingProxyType(pre_edge_table),
        custom_c_shims=MappingProxyType(custom_c_shims),
        passes=tuple(p for _, p in built["graph"]),
        pass_names=tuple(n for n, _ in built["graph"]),
        post_grad_passes=tuple(p for _, p in built["post_grad"]),
        post_grad_pass_names=tuple(n for n, _ in built["post_grad"]),
        pre_edge_passes=tuple(p for _, p in built["pre_edge"]),
        kernel_sources=sources,
        msl_shims=tuple(shim for shim in chosen.values() if _declares_msl(shim)),
        kernel_providers=MappingProxyType(kernel_providers),
        shadowed=tuple(shadowed),
        contests=tuple(contests),
        edge_exceptions=edge_exceptions,
    )
