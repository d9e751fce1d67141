"""Audit one model: torch.export, then an ExecuTorch AOTInductor lowering, recording kernels.

The path is the one a user runs — ``to_edge_transform_and_lower`` with the backend's partitioner and
``preprocess`` — with the backend configured from shimkit's registry (or stock, for ``--no-plugins``)
and observed by :class:`~shimkit.audit.recorder.KernelRecorder`. For Metal (the default target) the
lowering runs on fake mps tensors (:func:`~shimkit.audit.fake_mps.fake_mps_lowering`); for CUDA it is
the real lowering on the machine's GPU (:mod:`shimkit.audit.targets`).
"""

from __future__ import annotations

import contextlib
import copy
import linecache
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

import shimkit._progress as progress
import shimkit.audit.numerics as numerics_check  # called through the module: tests replace its functions
from shimkit._interrupts import is_ctrl_c, telling_ctrl_c_apart
from shimkit._patching import ScopedPatches
from shimkit.audit.fake_mps import fake_mps_lowering
from shimkit.audit.numerics import NumericsReport, NumericsUnavailable
from shimkit.audit.options import AuditOptions, Numerics
from shimkit.audit.provenance import PRE_EDGE, Decomposed, decompositions_applied, recording_decompositions
from shimkit.audit.linkage import unserved
from shimkit.audit.loader import LoadedModel
from shimkit.audit.names import Renaming, make_pasteable
from shimkit.passes.aliased_constants import merge_constants_aliasing_buffers
from shimkit.audit.recorder import GraphNode, KernelCall, KernelRecorder, SourceLine, graph_node, op_label, raised_at
from shimkit.audit.speed import cia_ops_materialized_once
from shimkit.audit.targets import METAL, Target
from shimkit.passes.decompose import Decline, recording_declines
from shimkit.passes.float64 import PrecisionChange, lower_float64_as_float32

PHASES = ("export", "to_edge", "backend_passes", "inductor", "codegen", "numerics")
# How each phase is said while it runs (shimkit._progress).
_SAID = {"export": "exporting", "to_edge": "lowering to the edge dialect",
         "backend_passes": "running the backend's passes",
         "inductor": "compiling with Inductor", "codegen": "generating the program", "numerics": "checking numerics"}

# What real work on the fake device raises here and would not on a Mac: no MPS in this build (device
# guards, dispatch stubs, kernels) or no data behind a fake weight.
_REAL_WORK_ON_FAKE_DEVICE = re.compile(
    r"not linked with support for mps|DispatchKey\.MPS|'MPS' backend|device type was provided mps"
    r"|Cannot copy out of meta tensor|Cannot access data pointer", re.IGNORECASE)
# Phases that run on the fake mps program (export and edge conversion still run on cpu).
_ON_FAKE_DEVICE = ("backend_passes", "inductor", "codegen")
_UPSTREAM_MISSING = re.compile(r"^Method \S+ missing fallback kernels \(\d+ total\):")


@dataclass
class Failure:
    """Why a model's audit stopped: ``kind`` is ``stopped`` (a finding in the model: ``to_edge`` or
    ``torch.export`` refuses an op the model calls, named with its node and source line), ``limitation``
    (lowering tried to run real work on the fake device, a known gap of the method) or ``error`` (anything
    else: the audit could not run the model's lowering to its end)."""

    kind: str  # stopped, limitation, error or interrupted (Ctrl-C: the models after it were not audited)
    phase: str
    message: str
    op: str | None = None
    node: GraphNode | None = None
    traceback: str = ""
    source: SourceLine | None = None  # the user's line: the node's, or (export) the model's frame that raised
    fixes: list[str] = field(default_factory=list)  # what would let a stopped model through (more in the report)


@dataclass
class ModelAudit:
    name: str
    plugins: bool
    kernels: list[KernelCall] = field(default_factory=list)
    supported: frozenset[str] = frozenset()
    upstream_errors: list[str] = field(default_factory=list)
    failure: Failure | None = None
    timings: dict[str, float] = field(default_factory=dict)
    partitions: int = 0
    numerics: NumericsReport | None = None
    declines: list[Decline] = field(default_factory=list)
    precision: list[PrecisionChange] = field(default_factory=list)
    decompositions: list[Decomposed] = field(default_factory=list)  # which plugin's decomposition took which node
    renaming: Renaming = field(default_factory=Renaming)  # the model's names generated code could not carry
    method: str | None = None  # the method of a program of several this audits (its name ends ``#method``)

    @property
    def missing(self) -> list[KernelCall]:
        return [k for k in self.kernels if k.name not in self.supported]

    @property
    def status(self) -> str:
        if self.failure is not None:
            return self.failure.kind
        if self.missing:
            return "missing"
        if self.numerics is not None and self.numerics.unavailable:
            return "unchecked"
        return "wrong" if self.numerics is not None and not self.numerics.ok else "clean"


class _PhaseClock:
    """Wall time of nested phases; each phase's figure excludes the phases nested inside it."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[list[Any]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._stack:
            parent = self._stack[-1]
            self.totals[parent[0]] = self.totals.get(parent[0], 0.0) + now - parent[1]
        self._stack.append([name, now])
        progress.stage(_SAID[name])
        try:
            yield
        finally:
            done = time.perf_counter()
            _, started = self._stack.pop()
            self.totals[name] = self.totals.get(name, 0.0) + done - started
            if self._stack:
                self._stack[-1][1] = done


_FAILING_NODE = "_shimkit_failing_fx_node"


@dataclass
class _LoweringWatch:
    current_phase: str = "to_edge"


def _watch_lowering(patches: ScopedPatches, backend_cls: Any, clock: _PhaseClock,
                    audit: ModelAudit, watch: _LoweringWatch,
                    to_inductor: Callable[[Any, tuple[Any, ...]], None] | None = None) -> None:
    """Time the phases, keep upstream's missing-kernel error per partition, and note the FX node
    Inductor was lowering when something failed."""
    import torch._inductor as inductor
    import torch._inductor.graph as inductor_graph
    from executorch.backends.aoti.aoti_backend import AotiBackend
    from executorch.exir.backend.backend_details import PreprocessResult

    # AotiBackend's own preprocess, where every AOTI backend's passes and compilation run: CudaBackend
    # reaches it through its own preprocess_multimethod and super().preprocess, never its preprocess.
    original_preprocess = vars(AotiBackend)["preprocess"].__func__

    def preprocess(cls, edge_program, compile_specs):
        if not issubclass(cls, backend_cls):
            return original_preprocess(cls, edge_program, compile_specs)
        audit.partitions += 1
        watch.current_phase = "backend_passes"
        try:
            with clock.phase("backend_passes"):
                result = original_preprocess(cls, edge_program, compile_specs)
        except RuntimeError as error:
            if not _UPSTREAM_MISSING.match(str(error)):
                raise
            # Upstream stops at the first partition with missing kernels. Keeping its message and
            # going on audits every partition; the recorder already holds this one's kernels.
            audit.upstream_errors.append(str(error))
            result = PreprocessResult(processed_bytes=b"", debug_handle_map={})
        watch.current_phase = "to_edge"
        return result

    patches.replace(AotiBackend, "preprocess", classmethod(preprocess))

    original_aot_compile = inductor.aot_compile

    def aot_compile(*args, **kwargs):
        if to_inductor is not None:
            to_inductor(args[0] if args else kwargs["gm"], tuple(args[1] if len(args) > 1 else kwargs["args"]))
        watch.current_phase = "inductor"
        with clock.phase("inductor"):
            return original_aot_compile(*args, **kwargs)

    patches.replace(inductor, "aot_compile", aot_compile)

    original_codegen = inductor_graph.GraphLowering.codegen

    def codegen(self, *args, **kwargs):
        watch.current_phase = "codegen"
        with clock.phase("codegen"):
            return original_codegen(self, *args, **kwargs)

    patches.replace(inductor_graph.GraphLowering, "codegen", codegen)

    # Every graph on the way runs through an FX interpreter: aot-autograd's trace of the edge graph
    # and Inductor's lowering of the traced one. The innermost node that raised is the culprit.
    original_run_node = torch.fx.Interpreter.run_node

    def run_node(self, node):
        try:
            return original_run_node(self, node)
        except Exception as error:
            # Marked on the exception, not kept aside: errors that something catches and handles
            # must not be blamed later. Wrapping exceptions keep it reachable through __cause__.
            if not hasattr(error, _FAILING_NODE):
                with contextlib.suppress(AttributeError):
                    setattr(error, _FAILING_NODE, node)
            raise

    patches.replace(torch.fx.Interpreter, "run_node", run_node)


_MESSAGE_LIMIT = 4000
# The edge verifier's refusal of an op outside core ATen (torch._export.verifier, ExecuTorch's edge verifier),
# as the first line of its message spells the op.
_NOT_CORE = re.compile(r"Operator torch\._ops\.(?P<op>\S+) is not in Core ATen opset")


def _describe_failure(error: BaseException, watch: _LoweringWatch) -> Failure:
    chain = [error]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(cause)
    stop = _stop_at_edge(chain) if watch.current_phase == "to_edge" else (
        _stop_at_export(chain, error) if watch.current_phase == "export" else None)
    if stop is not None:
        stop.traceback = "".join(traceback.format_exception(error))
        return stop
    # Whole: the answer is often past the first line (SpecViolationError lists the operators after a colon).
    text = "\n".join(line.rstrip() for line in str(error).strip().splitlines() if line.strip())
    if len(text) > _MESSAGE_LIMIT:
        text = f"{text[:_MESSAGE_LIMIT]} ... ({len(text) - _MESSAGE_LIMIT} more characters in the traceback)"
    message = f"{type(error).__name__}: {text}"
    where = raised_at(error)
    if watch.current_phase == "export" and where is not None:  # the model's own code raised while traced
        message += f" (raised at {where.describe()})"
    real_work = any(_REAL_WORK_ON_FAKE_DEVICE.search(str(e)) for e in chain)
    node = op = None
    fx_node = next((getattr(e, _FAILING_NODE) for e in chain if hasattr(e, _FAILING_NODE)), None)
    if fx_node is not None:
        node = graph_node(fx_node)
        op = node.target
    return Failure(
        kind="limitation" if real_work and watch.current_phase in _ON_FAKE_DEVICE else "error",
        phase=watch.current_phase, message=message, op=op, node=node,
        traceback="".join(traceback.format_exception(error)))


def _stop_at_edge(chain: list[BaseException]) -> Failure | None:
    """``to_edge``'s verifier refusing an op outside core ATen: a finding in the model, named by the op and the
    node it stopped at. The verifier checks node after node (``for node in graph.nodes: ...
    _check_valid_op(node.target)``), so the node is the innermost ``node`` of its frames."""
    from torch._export.verifier import SpecViolationError

    for error in chain:
        match = _NOT_CORE.search(str(error)) if isinstance(error, SpecViolationError) else None
        if match is None:
            continue
        fx_node = None
        frame = error.__traceback__
        while frame is not None:
            candidate = frame.tb_frame.f_locals.get("node")
            if isinstance(candidate, torch.fx.Node) and candidate.op == "call_function":
                fx_node = candidate
            frame = frame.tb_next
        node = graph_node(fx_node) if fx_node is not None else None
        op = node.target if node is not None else match["op"].replace(".", "::", 1)
        # Its first line alone: the advice after it is about switching the verifier off, not about the model.
        said = str(error).strip().splitlines()[0].rstrip('"')
        return Failure("stopped", "to_edge", f"{op} is not core ATen, and to_edge's verifier stops at it before any "
                       f"backend sees it ({type(error).__name__}: {said})", op=op, node=node,
                       source=node.source if node is not None else None)
    return None


def _stop_at_export(chain: list[BaseException], error: BaseException) -> Failure | None:
    """``torch.export`` refusing an op the model calls, or a value the model's code reads from its input's data:
    a finding in the model, named by the op (where torch names one) and the model's line that called it."""
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                               UnsupportedOperatorException)
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    # Why export cannot trace the op, and what would let it (the op's name goes in at {op}).
    why = {UnsupportedOperatorException: ("it has no fake (meta) kernel, so export cannot know what it returns",
                                          "register a fake kernel for {op} (torch.library.register_fake)"),
           DynamicOutputShapeException: ("its output's shape depends on its input's values",
                                         "give {op} a fake kernel that allocates its output's size with "
                                         "ctx.new_dynamic_size() (torch.library.register_fake), or use a form whose "
                                         "size is fixed in advance"),
           DataDependentOutputException: ("the model decides in Python on a value it returns, read from the input's "
                                          "data", "express that decision in the graph (torch.where, torch.cond) "
                                          "instead of reading {op}'s result in Python")}
    # No plugin can act before the model is exported: the fix is in the model (or the op's registration).
    where = raised_at(error)
    for stop in chain:
        func = getattr(stop, "func", None)
        if type(stop) in why and func is not None:
            op = op_label(func)
            reason, fix = why[type(stop)]
            return Failure("stopped", "export", f"torch.export cannot trace {op}: {reason}", op=op, source=where,
                           fixes=[fix.format(op=op)])
        if isinstance(stop, GuardOnDataDependentSymNode):
            said = str(stop).strip().splitlines()[0]
            return Failure("stopped", "export", "torch.export stops where the model's code needs, as a number, a size "
                           f"or value that depends on its input's data ({type(stop).__name__}: {said})", source=where,
                           fixes=["keep data-dependent values out of Python decisions at that line: torch.cond for a "
                                  "branch, torch._check(...) to state a bound export can use, or a result whose "
                                  "size is fixed in advance"])
    return None


def export_model(loaded: LoadedModel, *, plugins: bool = True) -> torch.export.ExportedProgram:
    """``loaded``'s program (a ``.pt2``'s was made pasteable as it loaded), its names that generated code could not
    carry renamed (``loaded.renaming``) and the rest checked before anything generates code from it
    (:mod:`shimkit.audit.names`). With ``plugins``, transformers' sparse MoE blocks are exported in their dense form
    (:func:`shimkit.passes.experts.dense_experts`), which ``torch.export`` accepts where their expert loop stops it;
    the stock audit exports the model as its author wrote it."""
    from shimkit.passes.experts import dense_experts

    if loaded.exported is not None:
        return loaded.exported
    model = loaded.model.eval() if isinstance(loaded.model, torch.nn.Module) else loaded.model
    # As ExecuTorch's and optimum's export scripts do: a non-strict export runs in-place ops on real buffers the
    # module reaches outside its registered state (a KV cache), which with autograd on leaves them non-leaf
    # tensors that to_backend cannot copy.
    with torch.no_grad(), dense_experts(model) if plugins and isinstance(model, torch.nn.Module) \
            else contextlib.nullcontext():
        exported = torch.export.export(model, tuple(loaded.example_inputs), dynamic_shapes=loaded.dynamic_shapes,
                                       strict=False)
    loaded.renaming = make_pasteable(exported, loaded.name)
    merge_constants_aliasing_buffers(exported)  # a static KV cache: otherwise to_edge fails (passes/aliased_constants.py)
    return exported


def audit_loaded(loaded: LoadedModel, *, config: Any | None, options: AuditOptions = AuditOptions()) -> ModelAudit:
    """Audit one loaded model with ``options.target``'s backend configured from ``config`` (a registry
    ``BackendConfig``); ``None`` audits the stock upstream backend. ``options.speedups=False``
    leaves out :mod:`shimkit.audit.speed` (same report, slower; for comparing the two).
    ``Numerics.CHECK`` also runs the programs handed to Inductor against eager: on the CPU for Metal,
    compiled by AOTInductor on the GPU for CUDA (:mod:`shimkit.audit.numerics`); ``Numerics.EXECUTE``
    (Metal) compiles the generated Metal programs and runs those instead (:mod:`shimkit.runtime.program`).
    ``float64="float32"`` lowers float64 computation as float32 with shimkit's plugins
    (:mod:`shimkit.passes.float64`), listing every node it changed in ``precision``; the stock backend is
    audited as it is."""
    audit = ModelAudit(loaded.name, plugins=config is not None, method=loaded.method)
    clock = _PhaseClock()
    leftovers = _LoweringLeftovers()
    watch = _LoweringWatch(current_phase="export")
    recorder = KernelRecorder()
    with contextlib.ExitStack() as speed:
        if options.speedups:
            speed_patches = ScopedPatches()
            speed.callback(speed_patches.undo)
            cia_ops_materialized_once(speed_patches)
        speed.callback(leftovers.release)
        with telling_ctrl_c_apart() as ctrl_c:
            try:
                with progress.working_on(loaded.name):
                    _audit_into(audit, loaded, config, clock, watch, recorder, options)
            except KeyboardInterrupt as error:
                if is_ctrl_c(error, ctrl_c):
                    raise
                audit.failure = _describe_failure(error, watch)  # raised by the model's own code
    audit.kernels = list(recorder.calls.values())
    audit.renaming = loaded.renaming
    # Metal's runtime is the one whose API is known here (audit/linkage.py). A program --execute linked and ran
    # answered the question for real: what it calls resolved.
    executed = audit.numerics is not None and audit.numerics.ran == "program" and bool(audit.numerics.checks)
    if options.target.device == METAL.device and not executed:
        audit.kernels += unserved(recorder.runtime_calls.values(), config)
    audit.timings = {phase: clock.totals.get(phase, 0.0) for phase in PHASES}
    return audit


def _audit_into(audit: ModelAudit, loaded: LoadedModel, config: Any | None, clock: _PhaseClock,
                watch: _LoweringWatch, recorder: KernelRecorder, options: AuditOptions) -> None:
    from executorch.exir import to_edge_transform_and_lower

    target, numerics = options.target, options.numerics
    if numerics is Numerics.EXECUTE:
        from shimkit.runtime.program import build_runtime_in_background

        build_runtime_in_background(config)

    applied: list[Any] = []  # (pass, op, node, decomposition), while the lowering runs
    pre_edge: list[Decomposed] = []
    try:
        backend_cls, partitioner_cls = target.classes()
        with clock.phase("export"):
            exported = export_model(loaded, plugins=config is not None)
        watch.current_phase = "to_edge"
        delegates: list[Callable[..., Any]] = []
        unavailable: list[str] = []
        exported_eager: Any = None  # eager, where the model is a program exported already
        with contextlib.ExitStack() as scope:
            if config is not None:
                from shimkit.integration import registry_backend

                scope.enter_context(registry_backend(backend_cls, config))
                applied = scope.enter_context(recording_decompositions())
            session = None if not target.fake_device else scope.enter_context(fake_mps_lowering(backend_cls))
            scope.enter_context(recorder.recording())
            audit.declines = scope.enter_context(recording_declines())
            patches = ScopedPatches()
            scope.callback(patches.undo)
            def to_inductor(module: Any, example_inputs: tuple[Any, ...]) -> None:
                try:
                    delegates.append(
                        numerics_check.cpu_copy(module, session.real_values.find) if session is not None
                        # A copy: the CUDA backend empties the weights it hands over once they are packaged.
                        else numerics_check.AotiCompiled(copy.deepcopy(module), example_inputs,
                                                         torch.device(target.device)))
                except Exception as error:  # the check cannot run; the lowering must go on regardless
                    unavailable.append(f"copying the program handed to Inductor failed: "
                                       f"{type(error).__name__}: {error}")

            _watch_lowering(patches, backend_cls, clock, audit, watch, to_inductor if numerics else None)
            audit.supported = frozenset(backend_cls.get_supported_fallback_kernels())
            with clock.phase("to_edge"):
                edge_options = _exporters_lowering(loaded, config)
                if loaded.model is None and numerics:
                    # Before lowering, which takes over the program's constants (a non-persistent buffer's among
                    # them). Not a deep copy: an exporter's program may hold non-leaf tensors (optimum's caches).
                    exported_eager = exported.module()
                if config is not None:  # what a user runs around stock to_edge (README, "Before to_edge")
                    if options.float64 == "float32":
                        exported, audit.precision = lower_float64_as_float32(exported)
                    exported, pre_edge = _prepared_for_edge(config, exported)
                lowered = to_edge_transform_and_lower(
                    exported,
                    partitioner=[partitioner_cls([backend_cls.generate_method_name_compile_spec("forward")])],
                    **edge_options,
                )
    except (Exception, SystemExit) as error:  # sys.exit() in a model's forward ends this model only
        if audit.upstream_errors and not target.fake_device:
            return  # the real backend cannot go on without the missing kernels, already recorded
        audit.failure = _describe_failure(error, watch)
        return
    finally:  # what was decomposed before a failure is part of its story
        if config is not None:
            audit.decompositions = pre_edge + decompositions_applied(applied, config, target.backend)
    if numerics:
        executing = numerics is Numerics.EXECUTE
        with clock.phase("numerics"):
            try:
                eager = loaded.model if loaded.model is not None else exported_eager
                if not target.fake_device:
                    eager = numerics_check.on_device(eager, torch.device(target.device))
                if unavailable:
                    raise NumericsUnavailable(unavailable[0])
                if executing:
                    missing = sorted(n for n in recorder.calls if n not in audit.supported)
                    if missing:
                        raise NumericsUnavailable(f"the program cannot link without {', '.join(missing)}")
                    assert session is not None  # --execute is refused for targets without a fake device
                    delegates = numerics_check.executed_programs(session.wrapper_sources, delegates, config)
                progress.stage("copying the model to float64")
                reference = numerics_check.float64_reference(
                    loaded.model if loaded.model is not None else exported_eager)
                audit.numerics = numerics_check.compare(lowered.exported_program(), delegates, eager, exported,
                                                  tuple(loaded.example_inputs or exported.example_inputs[0]),
                                                  float64_as_float32=bool(audit.precision), reference=reference,
                                                  call_sites=_call_sites(recorder))
            except Exception as error:  # the check could not run: said so, never a crash of the audit
                where = raised_at(error)
                audit.numerics = NumericsReport(unavailable=f"{type(error).__name__}: {error}"[:500] + (
                    f" (raised at {where.describe()})" if where else ""))
            if executing:
                audit.numerics.ran = "program"


def _exporters_lowering(loaded: LoadedModel, config: Any | None) -> dict[str, Any]:
    """``to_edge_transform_and_lower``'s keyword arguments for ``loaded``: its exporter's ``Lowering`` (the recipe's
    ``EdgeCompileConfig`` fields and transform passes), with the plugins' edge exceptions where ``config`` is given."""
    lowering = loaded.lowering
    options = dict(lowering.compile_options) if lowering is not None else {}
    arguments: dict[str, Any] = {}
    if config is not None:
        arguments["compile_config"] = config.edge_compile_config(**options)
    elif options:
        from executorch.exir import EdgeCompileConfig

        arguments["compile_config"] = EdgeCompileConfig(**options)
    if lowering is not None and lowering.transform_passes:
        arguments["transform_passes"] = list(lowering.transform_passes)
    return arguments


def _call_sites(recorder: KernelRecorder) -> dict[str, str]:
    """Where the model calls each recorded kernel, as a verdict says it: ``", called for node convolution
    (aten.convolution.default) at model.py:12 in forward: y = self.conv(x)"``."""
    sites = {}
    for call in recorder.calls.values():
        if call.graph_nodes:
            node = call.graph_nodes[0]
            source = node.source
            more = f" (and {len(call.graph_nodes) - 1} more)" if len(call.graph_nodes) > 1 else ""
            sites[call.name] = (f", called for node {node.name} ({node.target}){more}"
                                + (f" at {source.describe()}" if source is not None else ""))
    return sites


def _prepared_for_edge(config: Any, exported: torch.export.ExportedProgram
                       ) -> tuple[torch.export.ExportedProgram, list[Decomposed]]:
    """``config.prepare_for_edge(exported)``, and the pre-edge decompositions it applied: each op of its table that
    was in the program and is gone after it (``run_decompositions`` retraces the whole program, so the nodes it
    decomposed are known by their op; one it declined keeps the op, and to_edge then stops at it)."""
    table = {op_label(op) for op in config.pre_edge_decomposition_table}

    def nodes_of(program: torch.export.ExportedProgram) -> dict[str, list[torch.fx.Node]]:
        found: dict[str, list[torch.fx.Node]] = {}
        for module in program.graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    if node.op == "call_function":
                        found.setdefault(op_label(node.target), []).append(node)
        return found

    before = {op: nodes for op, nodes in nodes_of(exported).items() if op in table}
    prepared = config.prepare_for_edge(exported)
    left = nodes_of(prepared) if before else {}
    decomposed = []
    for op, nodes in before.items():
        if op not in left:
            provision = config.capabilities.decompositions[op]
            decomposed.append(Decomposed(op, PRE_EDGE, provision.plugin, provision.source.describe(),
                                         [graph_node(n) for n in nodes]))
    return prepared, decomposed


class _LoweringLeftovers:
    """What one lowering leaves in process-wide places that nothing ever empties, released after
    the model's audit so that auditing many models in one process does not grow without bound:

    * ExecuTorch's ``is_same_node`` is an unbounded ``lru_cache`` keyed by FX nodes: it pins every
      graph the partitioner compared (about 5 graphs and 50 nodes per small model). Its entries
      describe graphs that are gone once the lowering returns, so emptying it changes no result.
    * ``ShapeEnv``'s methods memoised with ``functools.lru_cache`` or torch's ``_lru_cache``
      (``constrain_symbol_range`` and ``simplify`` without a bound, more with 256 entries) are keyed by the environment itself, so they pin
      the shape environments (and through them the fake tensors) of past exports. They only spare
      recomputing a fact about a live environment; the next call recomputes it.
    * Every ``GraphModule`` registers its generated source in ``linecache`` under a
      ``<eval_with_key>`` name for tracebacks; the entries this audit added are dropped (the modules
      they describe are garbage by now, and a live one re-registers on its next recompile).
    * The ``ExportPass`` instances in ExecuTorch's module-level edge pass lists keep the fake mode
      of the last program they ran on (on the pass and on its tracer), and with it that program's
      fake tensors and constants. Each call installs its own mode first, so the ones left behind
      are restored to what they were.
    """

    def __init__(self) -> None:
        self._lines_before = set(linecache.cache)
        self._modes = [(holder, holder.fake_tensor_mode) for edge_pass in _module_level_edge_passes()
                       for holder in (edge_pass, edge_pass.tracer)]

    def release(self) -> None:
        from executorch.exir.backend.utils import is_same_node

        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        is_same_node.cache_clear()
        for memoised in vars(ShapeEnv).values():
            clear = getattr(memoised, "cache_clear", None)  # functools' and torch's own _lru_cache
            if callable(clear):
                clear()
        for holder, mode in self._modes:
            holder.fake_tensor_mode = mode
        for key in [k for k in linecache.cache if k not in self._lines_before and k.startswith("<eval_with_key>")]:
            linecache.cache.pop(key, None)


def _module_level_edge_passes() -> list[Any]:
    """The ``ExportPass`` instances behind ExecuTorch's module-level edge pass lists."""
    import executorch.exir.passes as edge_passes

    found = []
    for wrapped in (*edge_passes.base_pre_op_replace_passes, *edge_passes.base_post_op_replace_passes):
        for cell in wrapped.__closure__ or ():
            candidate = cell.cell_contents
            if hasattr(candidate, "fake_tensor_mode") and hasattr(getattr(candidate, "tracer", None),
                                                                 "fake_tensor_mode"):
                found.append(candidate)
    return found


@dataclass
class AuditRun:
    """A whole ``shimkit audit`` invocation: the models in order and the configuration used."""

    models: list[ModelAudit]
    plugins: bool
    registry: Any
    config: Any | None
    interrupted: bool = False
    target: Target = METAL


def run_audit(specs: list[str], options: AuditOptions | None = None, *, registry: Any | None = None,
              on_progress: Callable[[int, int, str, ModelAudit | None], None] | None = None,
              **settings: Any) -> AuditRun:
    """Audit each MODEL in ``specs`` with ``options``, or with :class:`AuditOptions` built from ``settings``
    (``run_audit(specs, check_numerics=True)``; ``check_numerics`` is ``numerics``' older name). ``registry``
    defaults to the process-wide one; with ``plugins=False`` the stock backend is audited and the registry only
    informs fix hints. ``on_progress(index, total, name, audit)`` is called before (``audit=None``) and after
    each."""
    from shimkit.audit.loader import ModelLoadError, load_methods, split_method

    options = options_from(options, settings)
    plugins, target = options.plugins, options.target
    if registry is None:
        from shimkit.backend import get_registry

        registry = get_registry()
    config = registry.backend_config(target.device) if plugins else None
    models: list[ModelAudit] = []
    current: str | None = None  # what is being loaded or audited, for a Ctrl-C to name
    try:
        for index, spec in enumerate(specs):
            current = spec
            if on_progress:
                on_progress(index, len(specs), spec, None)
            try:
                methods = load_methods(spec)
            except ModelLoadError as error:
                models.append(ModelAudit(spec, plugins=plugins, method=split_method(spec)[1],
                                         failure=Failure(kind="error", phase="load", message=str(error))))
                if on_progress:
                    on_progress(index, len(specs), spec, models[-1])
                continue
            for loaded in methods:  # a program of several methods: a row each, in the factory's order
                current = loaded.name
                models.append(audit_loaded(loaded, config=config, options=options))
                if on_progress:
                    on_progress(index, len(specs), loaded.name, models[-1])
            current = None
    except KeyboardInterrupt:
        # Patches were undone on the way out. Report what was audited, and the model cut short.
        if current is not None and (not models or models[-1].name != current):
            models.append(ModelAudit(current, plugins=plugins, method=split_method(current)[1], failure=Failure(
                kind="interrupted", phase="interrupted", message="KeyboardInterrupt: the audit was interrupted")))
        return AuditRun(models, plugins, registry, config, interrupted=True, target=target)
    return AuditRun(models, plugins, registry, config, target=target)


def options_from(options: AuditOptions | None, settings: dict[str, Any]) -> AuditOptions:
    """``options``, or the :class:`AuditOptions` of keyword ``settings`` (never both)."""
    if options is not None:
        if settings:
            raise TypeError(f"give AuditOptions or settings, not both (got {', '.join(settings)})")
        return options
    if "check_numerics" in settings:
        settings = dict(settings)
        settings["numerics"] = settings.pop("check_numerics")
    return AuditOptions(**settings)

