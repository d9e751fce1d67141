"""Properties of passes and kernels, each a one-line assertion.

Every graph property takes a ``transform`` (a shimkit pass, a pipeline, a torch ``PassBase`` or any
callable that changes a graph in place or returns ``PassResult``/a new ``GraphModule``) and a
:class:`~shimkit.testing.programs.Program` drawn by :func:`~shimkit.testing.programs.graphs`. A failure
raises :class:`PropertyFailure` whose message ends with a runnable script reproducing it; under
hypothesis that is the script of the shrunk, minimal program.

>>> @given(graphs(VIEW_COPY_OPS + INPLACE_OPS))       # doctest: +SKIP
... def test_views(program):
...     assert_preserves_semantics(ReplaceViewCopyWithView(), program)
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch.fx.passes.infra.pass_base import PassResult

from shimkit.backend import get_registry
from shimkit.registry import OpPlugin, RandomReference, as_call, canonical_op_name
from shimkit.testing.kernels import MSL_TORCH_DTYPES, msl_kernel


class PropertyFailure(AssertionError):
    """A property does not hold; the message says which, why, and how to reproduce it."""


def _fail(what: str, transform: Any, program, detail: str) -> None:
    name = getattr(transform, "pass_name", None) or getattr(transform, "__name__", None) or repr(transform)
    message = f"{what} [{name}]: {detail}"
    raise PropertyFailure(f"{message}\n\nprogram: {program!r}\n\nReproduce with:\n\n"
                          f"{program.to_python(transform, message)}")


def _exception_text(error: BaseException) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" (at {frame[0].filename}:{frame[0].lineno})" if frame else ""
    return f"{type(error).__name__}: {error}{where}"


# -- running ---------------------------------------------------------------------------------------

def _takes_exported_program(transform: Any) -> bool:
    from shimkit.passes.base import ShimkitPass

    return isinstance(transform, ShimkitPass) or bool(getattr(transform, "requires_exported_program", False))


def apply(transform: Any, artifact: Any) -> tuple[Any, bool | None]:
    """Run ``transform`` on ``artifact``; return the transformed artifact and whether it says it
    changed anything (``None`` when it does not say)."""
    exported = isinstance(artifact, torch.export.ExportedProgram)
    target = artifact if not exported or _takes_exported_program(transform) else artifact.graph_module
    result = transform(target)
    modified = None
    if isinstance(result, PassResult):
        modified, result = bool(result.modified), result.graph_module
    if exported:
        if isinstance(result, torch.fx.GraphModule) and result is not artifact.graph_module:
            raise TypeError(f"{transform!r} returned a new GraphModule for an ExportedProgram; "
                            f"passes on exported programs must change its graph in place")
        return artifact, modified
    return (result if isinstance(result, torch.fx.GraphModule) else artifact), modified


def graph_of(artifact: Any) -> torch.fx.Graph:
    return artifact.graph_module.graph if isinstance(artifact, torch.export.ExportedProgram) else artifact.graph


def observe(artifact: Any, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Outputs, then the inputs and buffers as the call left them: in-place writes are behaviour."""
    if isinstance(artifact, torch.export.ExportedProgram):
        artifact = artifact.module()
        for name, buffer in list(artifact.named_buffers()):
            artifact.register_buffer(name, buffer.clone())  # the program's state must stay pristine
        outputs = artifact(*inputs)
    else:
        # forward, not __call__: GraphModule.__call__ prints the traceback of an expected failure.
        outputs = artifact.forward(*inputs)
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    # Cloned only after the whole call: an output aliasing an input must show later writes to it.
    return ([o.clone() for o in outputs] + list(inputs)
            + [b.clone() for _, b in artifact.named_buffers()])


def _labels(program, count_outputs: int) -> list[str]:
    return ([f"output {i} ({name})" for i, name in enumerate(program.outputs)][:count_outputs]
            + [f"input {name} after the call" for name, _ in program.inputs]
            + [f"buffer {name} after the call" for name, _ in program.buffers])


def _difference(actual: torch.Tensor, expected: torch.Tensor, rtol, atol) -> str | None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (f"{actual.dtype}{list(actual.shape)} where the original gives "
                f"{expected.dtype}{list(expected.shape)}")
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as error:
        return f"{str(error).splitlines()[0]}\n  got      {actual.tolist()}\n  expected {expected.tolist()}"
    return None


# -- graph properties ------------------------------------------------------------------------------

def assert_preserves_semantics(transform: Any, program, *, rtol: float | None = None,
                               atol: float | None = None) -> None:
    """Outputs, and the final state of every input and buffer, are what the untransformed program gives.

    ``rtol``/``atol`` default to ``torch.testing.assert_close``'s for the dtype; programs drawn with the
    default small-integer values compute exactly, so a change in meaning is a change in value.
    """
    expected = observe(program.build(), program.example_inputs())
    try:
        transformed, _ = apply(transform, program.build())
    except Exception as error:
        _fail("the transform raised", transform, program, _exception_text(error))
    try:
        actual = observe(transformed, program.example_inputs())
    except Exception as error:
        _fail("the transformed program raised", transform, program, _exception_text(error))
    expected_outputs = len(expected) - len(program.inputs) - len(program.buffers)
    actual_outputs = len(actual) - len(program.inputs) - len(program.buffers)
    if actual_outputs != expected_outputs:
        _fail("semantics changed", transform, program,
              f"{actual_outputs} outputs where the original has {expected_outputs}")
    for label, got, want in zip(_labels(program, expected_outputs), actual, expected):
        difference = _difference(got, want, rtol, atol)
        if difference:
            _fail("semantics changed", transform, program, f"{label}: {difference}")


def _graph_text(artifact: Any) -> str:
    return str(graph_of(artifact))


def assert_idempotent(transform: Any, program) -> None:
    """A second run changes nothing and says so (pipelines iterating to a fixed point rely on it)."""
    artifact, _ = apply(transform, program.build())
    once = _graph_text(artifact)
    artifact, modified = apply(transform, artifact)
    twice = _graph_text(artifact)
    if once != twice:
        _fail("not idempotent", transform, program,
              f"the second run changed the graph\n--- after one run:\n{once}\n--- after two:\n{twice}")
    if modified:
        _fail("not idempotent", transform, program,
              "the second run changed nothing but reported modified=True")


def _op_names(ops: Iterable[Any]) -> set[str]:
    return {canonical_op_name(op) for op in ops}


def _node_op_name(node: torch.fx.Node) -> str | None:
    from shimkit.passes.ops import aten_op  # sees through edge-dialect wrappers

    op = aten_op(node.target) if node.op == "call_function" else None
    return canonical_op_name(op) if op is not None else None


def assert_eliminates(transform: Any, program, ops: Iterable[Any]) -> None:
    """No call of ``ops`` (names or overloads, either dialect) is left after ``transform``."""
    names = _op_names(ops)
    artifact, _ = apply(transform, program.build())
    left = [node.format_node() for node in graph_of(artifact).nodes if _node_op_name(node) in names]
    if left:
        _fail("ops not eliminated", transform, program, "left in the graph:\n  " + "\n  ".join(left))


def _layout(value: Any) -> Any:
    """What a value's metadata must get right: shape, dtype, and the strides and offset that address
    its elements (a size-1 dim's stride, and an empty tensor's strides and offset, address nothing)."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return (tuple(value.shape), value.dtype)
        strides = tuple(None if side == 1 else stride for side, stride in zip(value.shape, value.stride()))
        return (tuple(value.shape), strides, value.storage_offset(), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_layout(v) for v in value)
    return value


def _materialize(value: Any) -> Any:
    """A real tensor with ``value``'s shape, strides and storage offset (contents do not matter)."""
    if not isinstance(value, torch.Tensor):
        return value
    extent = value.storage_offset() + sum((s - 1) * st for s, st in zip(value.shape, value.stride())) + 1
    storage = torch.zeros(max(extent, 0) if value.numel() else value.storage_offset(), dtype=value.dtype)
    return storage.as_strided(value.shape, value.stride(), value.storage_offset())


def meta_problems(artifact: Any) -> list[str]:
    """Nodes whose ``meta["val"]`` is missing or disagrees (shape, strides, offset, dtype) with what
    running the graph on fake tensors gives."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from shimkit.testing.programs import fake_values

    graph_module = artifact.graph_module if isinstance(artifact, torch.export.ExportedProgram) else artifact
    placeholders = list(graph_module.graph.find_nodes(op="placeholder"))
    missing = [n for n in placeholders if "val" not in n.meta]
    if missing:
        return [f"placeholder {n.name} has no meta['val']" for n in missing]
    inputs = [_materialize(n.meta["val"]) for n in placeholders]
    recomputed = fake_values(graph_module, inputs, FakeTensorMode(allow_non_fake_inputs=True))
    problems = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if "val" not in node.meta:
            problems.append(f"{node.format_node()}: no meta['val']")
            continue
        have, want = _layout(node.meta["val"]), _layout(recomputed[node])
        if have != want:
            problems.append(f"{node.format_node()}: meta['val'] is {have}, running it gives {want}")
    return problems


def assert_meta_consistent(transform: Any, program) -> None:
    """After ``transform`` every node's ``meta["val"]`` matches a fresh fake-tensor run of the graph."""
    artifact, _ = apply(transform, program.build())
    problems = meta_problems(artifact)
    if problems:
        _fail("meta inconsistent", transform, program, "\n  ".join(problems))


# -- kernels and decompositions --------------------------------------------------------------------

def _compare(label: str, actual: Any, expected: Any, rtol, atol) -> None:
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise PropertyFailure(f"{label}: got {type(actual).__name__} where the reference gives "
                                  f"{len(expected)} results")
        for index, (a, e) in enumerate(zip(actual, expected)):
            _compare(f"{label}, result {index}", a, e, rtol, atol)
        return
    if expected is None or actual is None:
        if actual is not expected:
            raise PropertyFailure(f"{label}: got {actual!r} where the reference gives {expected!r}")
        return
    difference = _difference(actual, expected, rtol, atol)
    if difference:
        raise PropertyFailure(f"{label}: {difference}")


def _arguments_text(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    from shimkit.testing.opspecs import recipe_of

    def text(value):
        return recipe_of(value).expression() if isinstance(value, torch.Tensor) else repr(value)

    return ", ".join([text(a) for a in args] + [f"{k}={text(v)}" for k, v in kwargs.items()])


def assert_matches_reference(implementation: Callable, reference: Callable, args: Sequence[Any],
                             kwargs: Mapping[str, Any] | None = None, *, rtol: float | None = None,
                             atol: float | None = None) -> None:
    """``implementation(*args, **kwargs)`` equals ``reference(...)`` (NaN equal to NaN)."""
    kwargs = dict(kwargs or {})
    expected = reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    try:
        actual = implementation(*args, **kwargs)
    except Exception as error:
        raise PropertyFailure(f"{getattr(implementation, '__qualname__', implementation)} raised "
                              f"{_exception_text(error)} on ({_arguments_text(args, kwargs)})") from error
    try:
        _compare(getattr(implementation, "__qualname__", repr(implementation)), actual, expected, rtol, atol)
    except PropertyFailure as failure:
        raise PropertyFailure(f"{failure}\n  arguments: ({_arguments_text(args, kwargs)})") from None


def _fresh(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest distance between the empirical CDFs of ``a`` and ``b`` (1-D, float64)."""
    a, b = a.sort().values, b.sort().values
    pooled = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, pooled, right=True).double() / a.numel()
    cdf_b = torch.searchsorted(b, pooled, right=True).double() / b.numel()
    return float((cdf_a - cdf_b).abs().max())


def assert_same_distribution(implementation: Callable, reference: Callable, args: Sequence[Any],
                             kwargs: Mapping[str, Any] | None = None, *, samples: int = 4096,
                             significance: float = 1e-6, seed: int = 0) -> None:
    """``implementation(*args, **kwargs)`` draws like the random op ``reference``: every call gives results
    of the reference's shapes and dtypes, and the values, pooled over repeated calls until each side has
    ``samples`` of them, pass a two-sample Kolmogorov-Smirnov test at ``significance`` (rejecting only a
    distance above ``sqrt(-ln(significance / 2) / 2) * sqrt((n + m) / (n m))``; conservative for discrete
    values). NaN must appear in both or neither. Torch's global RNG is seeded with ``seed`` for the check
    and restored after it, so the outcome does not depend on what ran before.
    """
    import math

    kwargs = dict(kwargs or {})
    name = getattr(implementation, "__qualname__", repr(implementation))
    drawn: dict[str, list[torch.Tensor]] = {"implementation": [], "reference": []}
    drawn_count = 0  # elements in drawn["reference"]: a running total (re-summing the list per call is quadratic)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(samples):
            expected = reference(*map(_fresh, args), **{k: _fresh(v) for k, v in kwargs.items()})
            try:
                actual = implementation(*map(_fresh, args), **{k: _fresh(v) for k, v in kwargs.items()})
            except Exception as error:
                raise PropertyFailure(f"{name} raised {_exception_text(error)} on "
                                      f"({_arguments_text(args, kwargs)})") from error
            expected_leaves, actual_leaves = ([t for t in torch.utils._pytree.tree_leaves(result)
                                                if isinstance(t, torch.Tensor)] for result in (expected, actual))
            layouts = [(tuple(t.shape), t.dtype) for t in expected_leaves]
            if [(tuple(t.shape), t.dtype) for t in actual_leaves] != layouts:
                raise PropertyFailure(f"{name}: results {[(tuple(t.shape), t.dtype) for t in actual_leaves]} where "
                                      f"the random reference gives {layouts}\n  arguments: "
                                      f"({_arguments_text(args, kwargs)})")
            drawn["reference"] += [t.detach().reshape(-1).double() for t in expected_leaves]
            drawn["implementation"] += [t.detach().reshape(-1).double() for t in actual_leaves]
            drawn_now = sum(t.numel() for t in expected_leaves)
            drawn_count += drawn_now
            if drawn_count >= samples or not drawn_now:
                break
    a, b = torch.cat(drawn["implementation"]), torch.cat(drawn["reference"])
    if not a.numel():
        return
    if bool(a.isnan().any()) != bool(b.isnan().any()):
        raise PropertyFailure(f"{name}: NaN in {'only the implementation' if a.isnan().any() else 'only the reference'}"
                              f"\n  arguments: ({_arguments_text(args, kwargs)})")
    a, b = a[~a.isnan()], b[~b.isnan()]
    if not a.numel() or not b.numel():
        return
    distance = _ks_statistic(a, b)
    critical = math.sqrt(-math.log(significance / 2) / 2) * math.sqrt((a.numel() + b.numel()) / (a.numel() * b.numel()))
    if distance > critical:
        raise PropertyFailure(f"{name}: values drawn unlike the reference's (Kolmogorov-Smirnov distance "
                              f"{distance:.4f} > {critical:.4f} over {a.numel()} values; implementation "
                              f"min/mean/max {a.min():.4g}/{a.mean():.4g}/{a.max():.4g}, reference "
                              f"{b.min():.4g}/{b.mean():.4g}/{b.max():.4g})\n  arguments: "
                              f"({_arguments_text(args, kwargs)})")


class _OpCall(torch.nn.Module):
    """``op`` called with the given non-tensor arguments and the module's tensor inputs in place."""

    def __init__(self, op: Callable, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        super().__init__()
        self.op, self.args, self.kwargs = op, list(args), dict(kwargs)
        self.slots: list[int | str] = [i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)]
        self.keyword_slots: list[int | str] = [k for k, v in self.kwargs.items() if isinstance(v, torch.Tensor)]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.args[s] if isinstance(s, int) else self.kwargs[s] for s in self.slots + self.keyword_slots)

    def call_with(self, tensors: Sequence[torch.Tensor]) -> tuple[list[Any], dict[str, Any]]:
        args, kwargs = list(self.args), dict(self.kwargs)
        for slot, tensor in zip(self.slots + self.keyword_slots, tensors):
            if isinstance(slot, int):
                args[slot] = tensor
            else:
                kwargs[slot] = tensor
        return args, kwargs

    def forward(self, *tensors: torch.Tensor) -> Any:
        args, kwargs = self.call_with(tensors)
        return self.op(*args, **kwargs)


def assert_decomposition_dynamic(op: Any, decomposition: Callable, reference: Callable, args: Sequence[Any],
                                 kwargs: Mapping[str, Any] | None = None, *, rtol: float | None = None,
                                 atol: float | None = None) -> None:
    """``decomposition``, spliced into a program exported with every tensor dimension dynamic, agrees
    with ``reference`` at sizes other than the example's: each dimension's bounds and one past it.

    Eager checks cannot see a decomposition that reads a size as a Python number and bakes it in (a
    scan with the example's step count): it is right at every size it is called with. Traced on
    symbolic sizes it either guards (refused by the decomposition pass, reported here) or computes
    the same graph at every size, which is then run at other sizes.
    """
    from torch.export import Dim
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    from torch.fx.experimental.symbolic_shapes import PendingUnbackedSymbolNotFound

    from shimkit.audit.numerics import inputs_at, size_plans
    from shimkit.passes import DecomposeInPlace
    from shimkit.registry import resolve_op

    overload = resolve_op(op) if isinstance(op, str) else op
    # Distinct, dense inputs: export gives a tensor passed twice one placeholder, the sizes below vary
    # each input on its own, and the program would guard on a strided example's strides (layouts are
    # the eager check's business).
    def fresh(value: Any) -> Any:
        return value.clone(memory_format=torch.contiguous_format) if isinstance(value, torch.Tensor) else value

    args = [fresh(a) for a in args]
    kwargs = {k: fresh(v) for k, v in (kwargs or {}).items()}
    module = _OpCall(overload, args, kwargs)
    tensors = module.tensors()
    if not tensors:
        return
    label = f"dynamic-shape decomposition of {canonical_op_name(op)}"
    try:
        program = torch.export.export(module, tensors, strict=False,
                                      dynamic_shapes=(tuple({d: Dim.AUTO for d in range(t.dim())} for t in tensors),))
    except (torch._dynamo.exc.UserError, PendingUnbackedSymbolNotFound, UnsupportedOperatorException):
        # A call torch cannot export with dynamic dims (data-dependent sizes, an op without a fake
        # kernel, which only a static export runs for real) is outside this check.
        return
    exported = program.module()  # a copy: the sizes export itself accepts, before the decomposition
    try:
        spliced = DecomposeInPlace({overload: decomposition})(program).modified
    except Exception as error:
        raise PropertyFailure(f"{label}: {_exception_text(error)}\n  arguments: "
                              f"({_arguments_text(args, kwargs or {})})") from error
    if not spliced:
        return  # export already expanded the op (a CompositeImplicitAutograd one): nothing of ours to run
    generator = torch.Generator().manual_seed(0)
    for plan in size_plans(program)[1:]:
        resized = inputs_at(program, tensors, plan, generator)
        call_args, call_kwargs = module.call_with(resized)
        try:
            expected = reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in call_args], **call_kwargs)
            exported(*resized)
        except Exception:
            # The op itself rejects these sizes (a relation export could not see), or the exported
            # program does (a runtime assertion export added while tracing the op).
            continue
        try:
            actual = program.module()(*resized)
            _compare("result", actual, expected, rtol, atol)
        except Exception as error:
            sizes = ", ".join(f"{tuple(t.shape)}" for t in resized)
            raise PropertyFailure(f"{label} at input sizes {sizes} (example: "
                                  f"{', '.join(str(tuple(t.shape)) for t in tensors)}): {error}") from None


def _find_plugin(plugin: str | OpPlugin, registry) -> OpPlugin:
    if isinstance(plugin, OpPlugin):
        return plugin
    registry = registry if registry is not None else get_registry()
    for entry in registry.op_plugins():
        if entry.name == plugin:
            return entry.record
    known = sorted(entry.name for entry in registry.op_plugins())
    raise LookupError(f"no op plugin named {plugin!r} is registered; registered: {', '.join(known)}")


def _cast_floats_to(dtype_name: str) -> Callable[[tuple], tuple]:
    dtype = getattr(torch, dtype_name)
    return lambda args: tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                              for a in args)


def inductor_metal(function: Callable) -> Callable:
    """``function`` as Inductor's Metal code generator compiles it, run on the CPU through
    :mod:`shimkit.metal` (:func:`~shimkit.metal.inductor.inductor_metal_on_cpu`): what a Mac would compute
    for an op a plugin declares ``generated_on`` Metal. Raises :class:`PropertyFailure` where Inductor
    wrote no Metal kernel for a call with elements (it fell back to ATen, so nothing would be checked).
    """
    def generated(*args: Any, **kwargs: Any) -> Any:
        from shimkit.metal.inductor import inductor_metal_on_cpu

        call = _OpCall(function, args, kwargs)
        with inductor_metal_on_cpu() as sources:
            result = torch.compile(call, fullgraph=True, dynamic=False)(*call.tensors())
        if not sources and any(t.numel() for t in torch.utils._pytree.tree_leaves(result)
                                if isinstance(t, torch.Tensor)):
            raise PropertyFailure(f"Inductor wrote no Metal kernel for {getattr(function, '__name__', function)}: "
                                  f"it fell back to ATen")
        return result

    generated.__qualname__ = f"Inductor's Metal code for {getattr(function, '__name__', function)}"
    return generated


def assert_plugin_matches_reference(plugin: str | OpPlugin, *, kernels: Mapping[Any, Callable] | None = None,
                                    registry=None, rtol: float | None = None, atol: float | None = None,
                                    settings=None, dynamic: bool = True) -> None:
    """Every decomposition of ``plugin`` (and every kernel in ``kernels``, op -> callable) agrees with
    the plugin's eager ``references`` on inputs from its ``input_strategies`` (or, for an op without
    one, from :func:`~shimkit.testing.opspecs.op_arguments`). With ``dynamic`` (the default) each
    decomposition is also traced with dynamic dimensions and checked at other sizes
    (:func:`assert_decomposition_dynamic`).

    Every MSL kernel a shim of the plugin ships (``Kernel(msl=MslKernel(...))``) is run through
    ``shimkit.metal`` in each of its dtypes, on the same inputs cast to that dtype, against the reference
    on those inputs: a plugin's Metal kernel is checked on Linux with no code of its own. An op the
    plugin declares ``generated_on`` Metal is checked the same way through the Metal code Inductor
    writes for it (:func:`inductor_metal`). Against a :class:`~shimkit.registry.RandomReference` the
    check is by distribution (:func:`assert_same_distribution`), at the drawn sizes only.

    Runs hypothesis itself under the loaded profile (or ``settings``): one line in a test. Without
    ``settings`` it has no deadline (or the pytest ini option ``shimkit_deadline``'s).
    """
    from hypothesis import given, strategies as st

    from shimkit.testing.opspecs import op_arguments

    record = _find_plugin(plugin, registry)
    kernels = {canonical_op_name(op): fn for op, fn in (kernels or {}).items()}
    stray = sorted(set(kernels) - set(record.ops))
    if stray:
        raise ValueError(f"kernels given for ops plugin {record.name!r} does not declare: {', '.join(stray)}")
    checks = []
    for op in record.ops:
        reference = record.references.get(op)
        implementations = [("decomposition", record.decompositions[op])] if op in record.decompositions else []
        if op in kernels:
            implementations.append(("kernel", kernels[op]))
        if "mps" in record.generated_on.get(op, ()) and reference is not None:
            implementations.append(("generated Metal code", inductor_metal(reference)))
        if not implementations:
            continue
        if reference is None:
            raise ValueError(f"plugin {record.name!r} has no reference for {op}: nothing to check against")
        factory = record.input_strategies.get(op)
        arguments = (factory().map(as_call) if factory is not None
                     else op_arguments(op, registry=registry))
        for kind, implementation in implementations:
            checks.append((f"{record.name}: {kind} of {op}", implementation, reference, arguments))
    for shim in record.shims:
        if shim.kernel is None or shim.kernel.msl is None:
            continue
        reference = record.references.get(shim.op)
        factory = record.input_strategies.get(shim.op)
        if reference is None or factory is None:
            raise ValueError(f"plugin {record.name!r} ships an MSL kernel for {shim.op} but no reference and input "
                             f"strategy to check it against")
        for dtype in shim.kernel.msl.dtypes:
            cast = _cast_floats_to(MSL_TORCH_DTYPES[dtype])
            checks.append((f"{record.name}: MSL kernel {shim.kernel.msl.function}_{dtype} of {shim.op}",
                           msl_kernel(shim.kernel, dtype), reference,
                           factory().map(as_call).map(lambda call, cast=cast: (cast(call[0]), call[1]))))
    if not checks:
        raise ValueError(f"plugin {record.name!r} has neither decompositions, kernels nor generated ops to check")

    def arguments_with(check_case):
        return check_case[3].map(lambda call: (check_case, call))

    @given(st.sampled_from(checks).flatmap(arguments_with))
    def check(case):
        (label, implementation, reference, _), (args, kwargs) = case
        try:
            if isinstance(reference, RandomReference):
                assert_same_distribution(implementation, reference, args, kwargs)
                return
            assert_matches_reference(implementation, reference, args, kwargs, rtol=rtol, atol=atol)
            if dynamic and label.startswith(f"{record.name}: decomposition of "):
                op = label.rsplit(" ", 1)[1]
                assert_decomposition_dynamic(op, implementation, reference, args, kwargs, rtol=rtol, atol=atol)
        except PropertyFailure as failure:
            raise PropertyFailure(f"{label}: {failure}") from None

    if settings is None:  # not hypothesis' 200 ms: the first example exports and compiles (issue 48)
        from hypothesis import HealthCheck
        from hypothesis import settings as hypothesis_settings

        pytest_plugin = sys.modules.get("shimkit.testing.pytest_plugin")
        # Nor its input-generation health check: on a loaded machine, drawing the samples' tensors took over
        # a second and failed a plugin's test that had nothing wrong (found in CI).
        settings = hypothesis_settings(deadline=getattr(pytest_plugin, "DEADLINE", None),
                                       suppress_health_check=[HealthCheck.too_slow])
    check = settings(check)
    check()
