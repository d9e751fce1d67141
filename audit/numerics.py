"""``shimkit audit --check-numerics``: run what the backend hands to Inductor, on the CPU, against eager.

"Lowers" is not "computes right": a decomposition that bakes the example size into a dynamic-shape
program lowers cleanly and returns wrong numbers at every other size. The audit already runs the
real lowering, so the exact ``GraphModule`` that ``MetalBackend.preprocess`` passes to
``torch._inductor.aot_compile`` (after shimkit's passes and decompositions) is at hand. This module

* keeps a CPU copy of each such module as it goes to Inductor (its graph as is; its fake mps weights
  replaced by the real values they were made from; ``device=mps`` arguments pointed at the CPU),
* runs the model's whole top-level program with each delegate call answered by that copy, at the
  example sizes and at other sizes the exported dynamic dimensions allow (their bounds, one past the
  example, and an unbounded dimension at twice the example plus one),
* and compares every output with the eager model on the same inputs, reporting the largest error.

What it proves: the graph shimkit produced computes the model's function at those sizes, with ATen's
CPU kernels standing in for the Metal ones. What it does not: that Inductor's Metal code or the
runtime's kernels compute the same (that is the Metal executor's job, docs/metal.md).

For ``--backend cuda`` the check runs on the GPU instead: each program handed to Inductor is compiled
by torch's own AOTInductor (:class:`AotiCompiled`) and compared with the eager model on CUDA
(:func:`on_device`), so Inductor's generated Triton code is what computes (docs/cuda.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import sympy
import torch
from torch import fx
from torch.utils import _pytree as pytree

import shimkit._progress as progress
from shimkit.passes.meta import finite_bound
from shimkit.store import EnvironmentFailure

CPU = torch.device("cpu")
# Largest absolute error allowed relative to the output's magnitude: the graph sums and multiplies
# in another order than eager (decompositions, fusions), which costs a few ulps of float32 and of the
# half types; a baked size or a wrong decomposition is off by whole units.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


class NumericsUnavailable(RuntimeError):
    """The program cannot be run as captured (the message says why): the check has no verdict, and the
    model is reported ``unchecked``, never ``wrong``."""


@dataclass
class NumericsCheck:
    """One run at one set of sizes: the largest error of each output, and whether all are within
    tolerance."""

    sizes: dict[str, int]
    max_errors: list[float]  # the lowered program's distance to eager, per output
    ok: bool
    error: str | None = None
    # Where a float64 reference ran: the lowered program's and eager's distances to it, per floating output
    # (None for an output it does not decide: integers, bools, an empty tensor).
    float64_errors: list[float | None] = field(default_factory=list)
    eager_float64_errors: list[float | None] = field(default_factory=list)


@dataclass
class SkippedSizes:
    """Sizes the program's declared ranges allow where eager itself raises (a prompt of no tokens that a reshape
    cannot take): no input a caller could give, so no verdict, but said."""

    sizes: dict[str, int]
    reason: str


@dataclass
class NumericsReport:
    """``ran`` says what computed the delegates: ``"graph"`` (the FX programs handed to Inductor, on ATen) or
    ``"program"`` (the generated Metal programs, executed)."""

    checks: list[NumericsCheck] = field(default_factory=list)
    skipped: list[SkippedSizes] = field(default_factory=list)
    unavailable: str | None = None
    ran: str = "graph"
    reference: str = "eager"  # what the verdicts were judged against: "float64" where that reference ran

    @property
    def ok(self) -> bool:
        return self.unavailable is None and all(check.ok for check in self.checks)


def cpu_copy(module: fx.GraphModule, real_value: Callable[[torch.Tensor], torch.Tensor | None]) -> fx.GraphModule:
    """``module`` with its graph unchanged, its tensor attributes replaced by the real CPU values
    behind them (``real_value(fake)``), and every ``device`` argument pointed at the CPU."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(module.graph, {}))
    graph._codegen = module.graph._codegen
    attributes: dict[str, Any] = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = _attribute(module, node.target)
            if isinstance(value, torch.Tensor):
                real = real_value(value)
                if real is None:
                    raise NumericsUnavailable(f"no real value is known for {node.target}")
                value = real
            attributes[node.target] = value
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": CPU}
        if node.op == "call_function" and node.target is torch.ops.aten.to.device:
            node.args = (node.args[0], CPU, *node.args[2:])
    copy = fx.GraphModule(attributes, graph)
    copy.recompile()
    return copy


def _attribute(module: torch.nn.Module, target: str) -> Any:
    owner: Any = module
    for part in target.split("."):
        owner = getattr(owner, part)
    return owner


def dynamic_dimensions(exported: torch.export.ExportedProgram) -> dict[sympy.Symbol, tuple[str, int]]:
    """Each symbol behind the program's input sizes: where it first appears (``x.shape[1]``, or
    ``s0 in x.shape[0] = 2*s0`` for a derived size) and its example value."""
    found: dict[sympy.Symbol, tuple[str, int]] = {}
    for node in exported.graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            if not isinstance(size, torch.SymInt):
                continue
            expr, hints = size.node.expr, _example_values(size.node.shape_env)
            for symbol in sorted(expr.free_symbols, key=str):
                where = (f"{node.name}.shape[{dim}]" if expr == symbol
                         else f"{symbol} in {node.name}.shape[{dim}] = {expr}")
                found.setdefault(symbol, (where, int(hints[symbol])))
    return found


def _example_values(shape_env: Any) -> Any:
    # torch 2.13 keeps the example values of backed symbols as ``backed_var_to_val``, earlier
    # releases as ``var_to_val``.
    return getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val


def size_plans(exported: torch.export.ExportedProgram) -> list[dict[sympy.Symbol, int]]:
    """Values for the program's dynamic dimensions: the example's, then each bound and one past the
    example (an unbounded dimension at twice the example plus one), all symbols moved together."""
    hints = {symbol: hint for symbol, (_, hint) in dynamic_dimensions(exported).items()}
    plans = [dict(hints)]
    if not hints:
        return plans
    # (lowest, highest or None): without a recorded range the example is the lowest value known.
    limits = {}
    for symbol, hint in hints.items():
        ranges = exported.range_constraints.get(symbol)
        low = hint if ranges is None else finite_bound(ranges.lower)
        limits[symbol] = (0 if low is None else low, None if ranges is None else finite_bound(ranges.upper))

    def clamped(symbol: sympy.Symbol, value: int) -> int:
        low, high = limits[symbol]
        return max(low, value if high is None else min(high, value))

    picks = (lambda symbol, hint: limits[symbol][0],
             lambda symbol, hint: 2 * hint + 1 if limits[symbol][1] is None else limits[symbol][1],
             lambda symbol, hint: clamped(symbol, hint + 1))
    for pick in picks:
        plan = {symbol: pick(symbol, hint) for symbol, hint in hints.items()}
        if plan not in plans:
            plans.append(plan)
    return plans


def inputs_at(exported: torch.export.ExportedProgram, examples: tuple[Any, ...], plan: dict[sympy.Symbol, int],
              generator: torch.Generator) -> tuple[Any, ...]:
    """Fresh inputs shaped for ``plan``: floating inputs from a normal distribution, integer and bool
    inputs drawn from the range of values the example holds (so indices stay valid)."""
    user_nodes = [n for n in exported.graph.find_nodes(op="placeholder")
                  if n.name in exported.graph_signature.user_inputs]
    flat, spec = pytree.tree_flatten(examples)
    tensors = [i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
    if len(tensors) != len(user_nodes):
        raise NumericsUnavailable(f"{len(tensors)} example tensors for {len(user_nodes)} program inputs")
    fresh = list(flat)
    for index, node in zip(tensors, user_nodes):
        example = flat[index]
        shape = [int(s.node.expr.xreplace(plan)) if isinstance(s, torch.SymInt) else int(s)
                 for s in node.meta["val"].shape]
        fresh[index] = _like(example, shape, generator)
    return pytree.tree_unflatten(fresh, spec)


def _like(example: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    if example.dtype.is_floating_point or example.dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(example.dtype)
    if example.dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if _counts_up(example) and shape:
        # Positions (a prefill's ``cache_position = arange(n)``, ``position_ids``) go on counting from the first:
        # drawn at random they repeat, and a cache written twice at one position in a run keeps whichever write
        # the device's kernel ends with (CUDA's index_copy does not say), so neither eager nor the program is an
        # answer to compare against.
        start = int(example.reshape(-1)[0])
        return (start + torch.arange(shape[-1], dtype=example.dtype)).expand(shape).contiguous()
    low, high = (int(example.min()), int(example.max())) if example.numel() else (0, 1)
    return torch.randint(low, high + 1, shape, generator=generator, dtype=example.dtype)


def _counts_up(example: torch.Tensor) -> bool:
    """Whether an integer ``example`` counts up by one along its last dimension, from the same start in every row."""
    if example.dim() == 0 or example.shape[-1] < 2 or example.numel() == 0 or example.dtype == torch.bool:
        return False
    rows = example.reshape(-1, example.shape[-1])
    return bool((rows.diff(dim=-1) == 1).all()) and bool((rows[:, 0] == rows[0, 0]).all())


class InitialState:
    """What a module's calls can change between the runs a verdict compares (its buffers and the other tensors its
    modules hold, a graph module's constants), saved when made; :meth:`restore` puts every one back in place.

    Each compared run starts from it: a prefill's KV cache otherwise carried the last size plan's tokens into the
    next in eager and in the float64 reference, while a program compiled for the GPU (:class:`AotiCompiled`, a
    process per run) started every run from its weights, so a verdict on a program with mutable buffers compared
    runs that started apart (llama-prefill-bf16 WRONG at length 5 on the H200, stock and shimkit alike).

    >>> counter = torch.nn.Module(); counter.register_buffer("calls", torch.zeros(()))
    >>> start = InitialState(counter); counter.calls += 1; start.restore(); counter.calls.item()
    0.0
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.saved: list[tuple[torch.nn.Module, str, torch.Tensor, torch.Tensor]] = []
        seen: set[int] = set()
        for owner in module.modules():
            held = {**owner._buffers, **{name: value for name, value in vars(owner).items()
                                         if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)}}
            for name, value in held.items():
                if isinstance(value, torch.Tensor) and id(value) not in seen:
                    seen.add(id(value))
                    self.saved.append((owner, name, value, value.detach().clone()))

    def restore(self) -> None:
        with torch.no_grad():
            for owner, name, tensor, value in self.saved:
                tensor.copy_(value)
                if getattr(owner, name, None) is not tensor:  # a run that rebound the attribute
                    setattr(owner, name, tensor)


def _restorer(run: Callable[..., Any]) -> Callable[[], None]:
    """How to put ``run``'s state back where it is now: its own ``restore_state``, or an :class:`InitialState`."""
    restore = getattr(run, "restore_state", None)
    if restore is not None:
        return restore
    if isinstance(run, torch.nn.Module):
        return InitialState(run).restore
    return lambda: None


class AotiCompiled:
    """A program handed to Inductor for a real device (CUDA), compiled by torch's own AOTInductor
    (``torch._inductor.aoti_compile_and_package``) and run by its loader in a process of its own
    (:mod:`shimkit.audit.aoti_process`: a package that crashes on load ends that process only).

    The program is exported and compiled once, on the first call; the dimensions that are symbolic in its inputs
    stay dynamic, so one compilation answers every :func:`size_plans` plan. Each call loads the package afresh:
    a mutable buffer starts every call from the program's weights, as :func:`compare` starts eager. Operands
    arrive on the CPU (the top-level program runs there) and results go back to it. A crash or hang of the child is
    a :class:`NumericsUnavailable` naming it: the audit reports the model ``unchecked``.
    """

    def __init__(self, module: fx.GraphModule, example_inputs: tuple[Any, ...], device: torch.device,
                 timeout_s: float = 900) -> None:
        self.module = module
        self.device = device
        self.timeout_s = timeout_s
        self.dynamic_dims = [
            [d for d, size in enumerate(value.shape) if isinstance(size, torch.SymInt)]
            if isinstance(value, torch.Tensor) else [] for value in example_inputs]
        self._folder: Any = None
        self._modules: list[str] = []

    def _export(self, operands: list[Any]) -> None:
        import tempfile

        from torch._inductor import aoti_compile_and_package
        from torch.export import Dim

        from shimkit.audit.aoti_process import custom_op_modules

        dynamic = tuple({d: Dim.DYNAMIC for d in dims} or None for dims in self.dynamic_dims)
        on_device = [o.to(self.device) if isinstance(o, torch.Tensor) else o for o in operands]
        exported = torch.export.export(module_on(self.module, self.device), tuple(on_device),
                                       dynamic_shapes=dynamic if any(self.dynamic_dims) else None, strict=False)
        self._modules = custom_op_modules(exported.graph)
        self._folder = tempfile.TemporaryDirectory(prefix="shimkit-aoti-")
        # Compiled here, where the program is at hand: a torch.export.save / load round trip to the child
        # failed to deserialise some programs on torch 2.11 (position_ids_dynamic on the H100).
        try:
            aoti_compile_and_package(exported, package_path=f"{self._folder.name}/package.pt2")
        except Exception as error:
            raise NumericsUnavailable(f"AOTInductor could not compile the program: {type(error).__name__}: "
                                      f"{str(error).splitlines()[0] if str(error) else ''}"[:400]) from error

    def __call__(self, *operands: Any) -> Any:
        import subprocess
        import sys

        if self._folder is None:
            self._export(list(operands))
        folder = self._folder.name
        torch.save([o.cpu() if isinstance(o, torch.Tensor) else o for o in operands], f"{folder}/inputs.pt")
        command = [sys.executable, "-m", "shimkit.audit.aoti_process", f"{folder}/package.pt2",
                   f"{folder}/inputs.pt", f"{folder}/outputs.pt", str(self.device), *self._modules]
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as timeout:
            raise NumericsUnavailable(f"AOTInductor's compile-and-run process took over {self.timeout_s:.0f} s") from timeout
        if child.returncode != 0:
            died = (f"died of signal {-child.returncode}" if child.returncode < 0
                    else f"exited {child.returncode}")
            lines = [line for line in child.stderr.splitlines() if line.strip()]
            raise NumericsUnavailable(f"AOTInductor's compile-and-run process {died}: {' | '.join(lines[-3:])[:400]}")
        return torch.load(f"{folder}/outputs.pt")


def module_on(module: fx.GraphModule, device: torch.device) -> fx.GraphModule:
    """A copy of ``module`` with its parameters, buffers and every other tensor its graph reads on
    ``device``. ``Module.to`` moves parameters and buffers only: a constant the model makes in ``forward``
    (``index = torch.tensor([0, 2])`` for a ``scatter_add``) is a plain attribute of the graph module, and
    left on the CPU it met the GPU operands ("Expected all tensors to be on the same device")."""
    import copy

    moved = copy.deepcopy(module).to(device)
    for node in moved.graph.find_nodes(op="get_attr"):
        *path, name = node.target.split(".")
        owner = _attribute(moved, ".".join(path)) if path else moved
        value = getattr(owner, name)
        if isinstance(value, torch.Tensor) and name not in owner._parameters and name not in owner._buffers:
            setattr(owner, name, value.to(device))
    return moved


def executed_programs(wrapper_sources: list[str], graphs: list[fx.GraphModule], config: Any | None) -> list[Any]:
    """The generated Metal programs, one per delegate, compiled against shimkit's Metal runtime (with ``config``'s
    plugin adapters; ``None``: stock) and loaded, their constants taken from the CPU copies of the graphs
    handed to Inductor. Compiled on the first call, so that lowering and compiling are timed apart."""
    if len(wrapper_sources) != len(graphs):
        raise NumericsUnavailable(f"{len(wrapper_sources)} generated programs for {len(graphs)} delegates")
    return [_ExecutedProgram(source, graph, config) for source, graph in zip(wrapper_sources, graphs)]


class _ExecutedProgram:
    def __init__(self, source: str, graph: fx.GraphModule, config: Any | None) -> None:
        self.source, self.graph, self.config = source, graph, config
        self.program: Any = None
        # The weights as lowered: the graph's tensors may be the model's own, which eager's runs write.
        self._weights = InitialState(graph)

    def __call__(self, *operands: Any) -> Any:
        from shimkit.metal.library import MetalCompileError
        from shimkit.runtime.program import KernelNotCompiled, MetalProgram, Unlinkable, WrapperDoesNotCompile

        # What keeps the program from running here is no verdict on its numbers; what fails while it runs is.
        try:
            if self.program is None:
                constants = {node.target: _attribute(self.graph, node.target)
                             for node in self.graph.graph.find_nodes(op="get_attr")}
                constants = {name: value for name, value in constants.items() if isinstance(value, torch.Tensor)}
                constants.update({name.replace(".", "_"): value for name, value in list(constants.items())})
                try:
                    self.program = MetalProgram(self.source, constants, config=self.config)
                except (Unlinkable, WrapperDoesNotCompile, MetalCompileError) as error:
                    raise NumericsUnavailable(f"{type(error).__name__}: {error}") from error
                except (EnvironmentFailure, OSError) as error:
                    raise NumericsUnavailable(_on_this_machine(error)) from error
                except Exception as error:  # the runtime or the wrapper did not compile, or did not load
                    raise NumericsUnavailable(f"the program did not build: {error}"[-1500:]) from error
            return self.program(*operands)
        except KernelNotCompiled as error:
            raise NumericsUnavailable(str(error)) from error

    def restore_state(self) -> None:
        """The program's constants, its mutable buffers among them, back to the values it was lowered with."""
        from shimkit.runtime.program import ProgramError

        self._weights.restore()
        if self.program is not None:
            try:
                self.program.restart()
            except ProgramError as error:  # ExecuTorch's own runtime refuses weights where a deleted program's were
                raise NumericsUnavailable(f"the program, which writes its buffers, could not be loaded afresh for "
                                          f"the next run: {error}"[:1500]) from error

    def take_divergences(self) -> list[tuple[str, str, str]]:
        """What the program's runs since the last take met where upstream's runtime computes otherwise than ATen."""
        if self.program is None:
            return []
        taken, self.program.divergences = self.program.divergences, []
        return taken


def on_device(model: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """``model`` run on ``device``: a copy of it moved there, CPU inputs moved in, outputs back to the CPU.
    It runs with ``device`` as the default device, so that a tensor ``forward`` makes without naming a device
    (``torch.zeros(2, 4).scatter_add(1, torch.tensor(...), x)``) is made there, as in the lowered program,
    whose constants live on the device: on the CPU it met the GPU operands and the check was lost."""
    import copy

    return _Moved(copy.deepcopy(model).to(device) if isinstance(model, torch.nn.Module) else model, device)


class _Moved:
    """A model run on a device (:func:`on_device`) or in float64 (:func:`float64_reference`), its state restorable."""

    def __init__(self, model: Callable[..., Any], device: torch.device, *, in_float64: bool = False) -> None:
        self.model, self.device, self.in_float64 = model, device, in_float64
        self.restore_state = _restorer(model)

    def _input(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if self.in_float64:
            return value.cpu().double() if value.is_floating_point() else value.cpu()
        return value.to(self.device)

    def __call__(self, *inputs: Any) -> Any:
        inputs = pytree.tree_map(self._input, inputs)
        if self.in_float64:
            return self.model(*inputs)
        with self.device:
            outputs = self.model(*inputs)
        return pytree.tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, outputs)


class _DelegatesOnCpu(fx.Interpreter):
    """Runs a lowered program on the CPU, answering each delegate call with the program standing in
    for it (the CPU copy of its Inductor input, or its :class:`AotiCompiled` build)."""

    def __init__(self, module: fx.GraphModule, programs: dict[str, Callable[..., Any]]) -> None:
        super().__init__(module)
        self.programs = programs

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        from executorch.exir.delegate import executorch_call_delegate

        if target is executorch_call_delegate:
            lowered, *operands = args
            name = next(n for n, m in self.module.named_children() if m is lowered)
            return self.programs[name](*operands)
        return super().call_function(target, args, kwargs)


def float64_reference(model: Callable[..., Any]) -> Callable[..., Any] | None:
    """``model`` computed in float64 on the CPU (a copy with its floating weights and inputs in float64), the
    reference Inductor's accuracy check judges a compiled model by; ``None`` for a model that is not a module."""
    import copy

    if not isinstance(model, torch.nn.Module):
        return None
    # Each floating parameter and buffer is copied once, straight to float64 on the CPU (whatever device the model
    # was exported on: a CUDA audit moves it to the GPU), rather than copied and then converted: a real model's
    # weights are gigabytes. The memo makes deepcopy take those copies for the tensors (tied weights stay tied).
    memo: dict[int, Any] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) in memo or not tensor.is_floating_point():
            continue
        double = tensor.detach().to(device="cpu", dtype=torch.float64)
        memo[id(tensor)] = torch.nn.Parameter(double, tensor.requires_grad) if isinstance(tensor, torch.nn.Parameter) \
            else double
    return _Moved(copy.deepcopy(model, memo).to(device="cpu", dtype=torch.float64), CPU, in_float64=True)


def compare(lowered: torch.export.ExportedProgram, delegates: list[Callable[..., Any]],
            eager: Callable[..., Any], exported: torch.export.ExportedProgram, examples: tuple[Any, ...],
            *, seed: int = 0, float64_as_float32: bool = False,
            reference: Callable[..., Any] | None = None, call_sites: Mapping[str, str] | None = None
            ) -> NumericsReport:
    """Check ``lowered`` (the top-level program after ``to_edge_transform_and_lower``), its delegate
    calls answered in order by ``delegates``, against ``eager`` at every :func:`size_plans` plan.
    ``float64_as_float32``: the program computes eager's float64 as float32 (``shimkit.passes.float64``); it is
    given float32 inputs for eager's float64 ones, and its float32 outputs are held to float32's tolerance
    against eager's float64. ``reference`` (:func:`float64_reference`) computes the same in float64: each
    floating output is then judged as Inductor's accuracy check judges one, by its distance to float64 against
    eager's own (see :func:`_compare`); a reference that cannot run leaves the judgement against eager, and so
    does a program drawing random numbers (a float64 run draws other samples, so its distance says nothing).
    Eager, the reference and the program each start every plan's run from the state they had when the check began
    (a KV cache is not carried from one plan into the next). A run whose executed program met a known divergence
    of upstream's runtime (``take_divergences``) is wrong whatever its numbers, said with the c-shim, the behaviour
    and ``call_sites[c-shim]`` (where the model calls it)."""
    if reference is not None and draws_random_numbers(exported):
        reference = None
    report = NumericsReport(reference="float64" if reference is not None else "eager")
    top = lowered.module()
    names = sorted((n for n, m in top.named_children() if type(m).__name__ == "LoweredBackendModule"),
                   key=lambda n: int(n.rsplit("_", 1)[-1]) if n.rsplit("_", 1)[-1].isdigit() else 0)
    if len(names) != len(delegates):
        report.unavailable = f"{len(names)} delegate calls but {len(delegates)} programs reached Inductor"
        return report
    interpreter = _DelegatesOnCpu(top, dict(zip(names, delegates)))
    # Every run a verdict compares starts from the state the model had when the check began (InitialState), all of
    # it put back before each run: eager's model and the program handed to Inductor may share their buffers' tensors.
    # A program that writes no buffer has no state to put back (and an executed one is not loaded again).
    signature = exported.graph_signature
    restorers = [_restorer(run) for run in (eager, reference, top, *delegates)
                 if run is not None] if _writes(exported, set(signature.inputs_to_buffers)) else []

    def from_the_start() -> None:
        for restore in restorers:
            restore()

    generator = torch.Generator().manual_seed(seed)
    where = dynamic_dimensions(exported)
    for index, plan in enumerate(size_plans(exported)):
        sizes = {where[symbol][0]: value for symbol, value in plan.items()}
        inputs = inputs_at(exported, examples, plan, generator) if plan else examples
        at = " at " + ", ".join(f"{name}={value}" for name, value in sizes.items()) if sizes else ""
        with torch.no_grad():
            from_the_start()
            try:
                progress.stage(f"running eager{at}")
                expected = pytree.tree_leaves(eager(*inputs))
            except Exception as error:
                if index == 0:  # at the example's own sizes: the check cannot run at all
                    raise
                report.skipped.append(SkippedSizes(sizes, f"eager itself raises {type(error).__name__}: "
                                                          f"{error}"[:500]))
                continue
            references = None
            if reference is not None:
                try:
                    from_the_start()
                    progress.stage(f"running the float64 reference{at}")
                    references = pytree.tree_leaves(reference(*inputs))
                except Exception:  # an op without float64 kernels: judged against eager alone
                    reference, report.reference = None, "eager"
            try:
                from_the_start()
                leaves = pytree.tree_leaves(inputs)
                if float64_as_float32:
                    leaves = [leaf.float() if isinstance(leaf, torch.Tensor) and leaf.dtype == torch.float64
                              else leaf for leaf in leaves]
                progress.stage(f"running the lowered program{at}")
                actual = pytree.tree_leaves(interpreter.run(*leaves))
            except NumericsUnavailable as error:  # the stand-in itself could not run: no verdict
                report.unavailable = str(error)[:2000]
                return report
            except (EnvironmentFailure, OSError) as error:  # numbers never raise these: the machine did
                report.unavailable = _on_this_machine(error)[:2000]
                return report
            except Exception as error:
                report.checks.append(_blamed(NumericsCheck(sizes, [], False, f"{type(error).__name__}: {error}"[:2000]),
                                             delegates, call_sites or {}))
                continue
        report.checks.append(_blamed(_compare(sizes, actual, expected, float64_as_float32, references), delegates,
                                     call_sites or {}))
    return report


def _writes(exported: torch.export.ExportedProgram, placeholders: set[str]) -> bool:
    """Whether ``exported`` writes one of ``placeholders`` (by name), or a view of one: as a functional program
    (``buffers_to_mutate``) or with in-place ops, as torch 2.13's export leaves them before decomposition
    (``aten.add_.Tensor`` on the buffer, ``index_put_`` on a slice of it)."""
    signature = exported.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    if {name for name, target in signature.inputs_to_buffers.items() if target in mutated} & placeholders:
        return True
    for node in exported.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.is_mutable:
            continue
        for argument, value in zip(schema.arguments, node.args):
            if argument.alias_info is not None and argument.alias_info.is_write and isinstance(value, fx.Node) \
                    and _viewed(value).name in placeholders:
                return True
    return False


def _viewed(node: fx.Node) -> fx.Node:
    """The node ``node`` is a view of (through ``slice``, ``select``, ``view``...), or ``node`` itself."""
    while node.op == "call_function" and node.args and isinstance(node.args[0], fx.Node):
        schema = getattr(node.target, "_schema", None)
        first = schema.arguments[0] if schema is not None and schema.arguments else None
        if first is None or first.alias_info is None or first.alias_info.is_write:
            break
        node = node.args[0]
    return node


def _blamed(check: NumericsCheck, delegates: list[Callable[..., Any]], call_sites: Mapping[str, str]
            ) -> NumericsCheck:
    """``check``, wrong with the divergences its run met as the cause, where it met any: the Mac computes them
    whether or not these inputs make the numbers differ."""
    met = list(dict.fromkeys(divergence for delegate in delegates
                             for divergence in getattr(delegate, "take_divergences", list)()))
    if met:
        by_behaviour: dict[tuple[str, str], list[str]] = {}
        for symbol, behaviour, detail in met:
            by_behaviour.setdefault((symbol, behaviour), []).append(detail)
        causes = "; ".join(
            f"{symbol} {behaviour} ({len(details)} such operand{'s' if len(details) > 1 else ''}, the first "
            f"{details[0]}){call_sites.get(symbol, '')}" for (symbol, behaviour), details in by_behaviour.items())
        numbers = check.error if not check.ok else "the numbers agree at these inputs"
        check.ok, check.error = False, f"as upstream's Metal runtime computes it: {causes} ({numbers})"
    return check


def draws_random_numbers(exported: torch.export.ExportedProgram) -> bool:
    """Whether ``exported`` calls an op ATen tags ``nondeterministic_seeded`` (rand, bernoulli, dropout...) in a
    way that draws: attention with ``dropout_p`` 0 and dropout outside training draw nothing."""
    return any(node.op == "call_function" and _draws(node)
               for module in exported.graph_module.modules() if isinstance(module, fx.GraphModule)
               for node in module.graph.nodes)


def _draws(node: fx.Node) -> bool:
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    schema = node.target._schema
    values = {argument.name: node.args[index] if index < len(node.args) else
              node.kwargs.get(argument.name, argument.default_value)
              for index, argument in enumerate(schema.arguments)}
    return not (values.get("train") is False or values.get("training") is False or values.get("dropout_p") == 0)


def _on_this_machine(error: BaseException) -> str:
    """Why this machine could not build, load or run a stand-in (an unusable build folder, a full disk, a
    missing compiler), as the report says it: no verdict on the program."""
    return f"this machine could not build or run the program: {type(error).__name__}: {error}"


# How much farther from float64 than eager a lowered output may be (Inductor's accuracy check: 2, and 3 for the
# half types, whose roundings differ most with the order of operations).
FLOAT64_MULTIPLIER = {torch.float16: 3.0, torch.bfloat16: 3.0}


def _compare(sizes: dict[str, int], actual: list[Any], expected: list[Any],
             float64_as_float32: bool = False, references: list[Any] | None = None) -> NumericsCheck:
    """Each output against eager: same shape, dtype and special values (NaN, infinities) where eager has them.
    A floating output with a float64 reference passes when its largest distance to float64 is at most
    ``multiplier`` times eager's plus the dtype's tolerance (relative to the output's magnitude), so a bf16
    program is held to what bf16 can do, not to bit equality with one bf16 order of operations; without one,
    when its distance to eager is within that tolerance."""
    if len(actual) != len(expected):
        return NumericsCheck(sizes, [], False, f"{len(actual)} outputs, eager has {len(expected)}")
    check = NumericsCheck(sizes, [], True)
    for index, (got, want) in enumerate(zip(actual, expected)):
        if not isinstance(want, torch.Tensor):
            continue
        lowered_precision = float64_as_float32 and want.dtype == torch.float64 and got.dtype == torch.float32
        if got.shape != want.shape or (got.dtype != want.dtype and not lowered_precision):
            check.ok, check.error = False, (f"output {index} is {got.dtype}{list(got.shape)}, "
                                            f"eager gives {want.dtype}{list(want.shape)}")
            return check
        reference = references[index] if references is not None and index < len(references) else None
        if not want.numel():
            check.max_errors.append(0.0)
            if reference is not None:
                check.float64_errors.append(None)
                check.eager_float64_errors.append(None)
            continue
        measured = _distances(got, want, reference if want.is_floating_point() else None)
        error = measured.error
        check.max_errors.append(error)
        dtype = got.dtype if lowered_precision else want.dtype
        tolerance = TOLERANCE.get(dtype, 0.0) * measured.scale
        judged = measured.against_float64
        if references is not None:
            check.float64_errors.append(None if judged is None else judged[0])
            check.eager_float64_errors.append(None if judged is None else judged[1])
        if judged is None:
            if error > tolerance and check.ok:
                check.ok, check.error = False, f"output {index}: max error {error:.3g} > {tolerance:.3g}"
            continue
        lowered_error, eager_error = judged
        allowed = FLOAT64_MULTIPLIER.get(dtype, 2.0) * eager_error + tolerance
        if lowered_error > allowed and check.ok:
            check.ok, check.error = False, (
                f"output {index}: max error {lowered_error:.3g} from float64 > {allowed:.3g} (eager's is "
                f"{eager_error:.3g}; {error:.3g} from eager)")
    return check


@dataclass
class _Distances:
    error: float  # the largest distance to eager (equal special values count 0, a NaN elsewhere infinity)
    scale: float  # max(1, eager's largest finite magnitude)
    against_float64: tuple[float, float] | None  # (lowered's, eager's) largest distance to the float64 reference


# Elements compared at a time: an LLM's logits are hundreds of megabytes in float64, and each comparison step
# would make a temporary of that size (tens of them, paged in afresh).
_CHUNK = 1 << 21


def _distances(got: torch.Tensor, want: torch.Tensor, reference: Any) -> _Distances:
    """``got`` against eager's ``want`` and, where ``reference`` is a float64 tensor of their shape, against it:
    (lowered's, eager's) largest distance to it where eager and the reference are finite, a value eager makes
    special (NaN, an infinity) having to be the same special value in ``got`` (infinite distance otherwise);
    ``None`` where the reference does not decide the output (nowhere finite with eager). In float64, a chunk of
    the flattened tensors at a time."""
    judged = isinstance(reference, torch.Tensor) and reference.shape == want.shape and reference.is_floating_point()
    flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    flat_reference = reference.reshape(-1) if judged else None
    error, magnitude, any_finite = 0.0, 0.0, False
    lowered, eager, decided, special_mismatch = 0.0, 0.0, False, False
    for start in range(0, flat_want.numel(), _CHUNK):
        got64 = flat_got[start:start + _CHUNK].double()
        want64 = flat_want[start:start + _CHUNK].double()
        same_special = (got64.isnan() & want64.isnan()) | (got64 == want64)
        difference = torch.where(same_special, 0.0, (got64 - want64).abs())
        error = max(error, float(difference.nan_to_num(nan=float("inf")).max()))
        finite_want = want64.isfinite()
        if finite_want.any():
            any_finite = True
            magnitude = max(magnitude, float(want64[finite_want].abs().max()))
        if flat_reference is None:
            continue
        reference64 = flat_reference[start:start + _CHUNK].double()
        finite = finite_want & reference64.isfinite()
        special_mismatch = special_mismatch or bool((~finite_want & ~same_special).any())
        if not finite.any():
            continue
        decided = True
        distance = (got64 - reference64).abs().where(finite, 0.0).nan_to_num(nan=float("inf"))
        lowered = max(lowered, float(distance.max()))
        eager = max(eager, float((want64 - reference64).abs().where(finite, 0.0).max()))
    scale = max(1.0, magnitude) if any_finite else 1.0
    against = (float("inf") if special_mismatch else lowered, eager) if decided else None
    return _Distances(error, scale, against)
