"""Random well-typed programs over a chosen op set, as FX graphs, ExportedPrograms or edge programs.

:func:`graphs` draws a :class:`Program`: inputs and buffers (each a :class:`TensorRecipe` with its own
view history), a list of op calls and the outputs. Calls take existing values as arguments whenever
shapes allow, so subexpressions are shared; in-place ops write inputs, buffers, intermediates and views
of them; multi-output ops (``split``, ``unbind``) are unpacked with ``getitem`` as export does. Every
call is checked on meta tensors while drawing, so a program is valid by construction, and the program
shrinks by dropping calls and simplifying inputs.

A program is data. It renders itself as Python (:mod:`shimkit.testing.repro`) and is *built by running
that Python*, so the script printed for a failure is exactly what was tested.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from hypothesis import assume, strategies as st

from shimkit.testing.opspecs import SELF, OpSpec, TensorArg, op_spec
from shimkit.testing.repro import Ref, graph_module_source, module_source, program_summary, script
from shimkit.testing.strategies import TensorRecipe, shapes, tensor_recipes

FORMS = ("fx", "export", "edge")
DIALECTS = ("aten", "edge")

# Op sets for the common cases. View ops and their *_copy twins, the in-place writes that make
# aliasing observable, and the matmul family the linear/addmm decompositions touch.
VIEW_COPY_OPS = (
    "aten::slice_copy.Tensor", "aten::select_copy.int", "aten::split_copy.Tensor",
    "aten::split_with_sizes_copy.default", "aten::unbind_copy.int", "aten::transpose_copy.int",
    "aten::t_copy.default", "aten::permute_copy.default", "aten::expand_copy.default",
    "aten::view_copy.default", "aten::unsqueeze_copy.default", "aten::squeeze_copy.dim",
    "aten::squeeze_copy.dims", "aten::diagonal_copy.default", "aten::unfold_copy.default",
    "aten::detach_copy.default", "aten::alias_copy.default", "aten::narrow_copy.default",
)
VIEW_OPS = (
    "aten::slice.Tensor", "aten::select.int", "aten::split.Tensor", "aten::split_with_sizes.default",
    "aten::unbind.int", "aten::transpose.int", "aten::t.default", "aten::permute.default",
    "aten::expand.default", "aten::view.default", "aten::unsqueeze.default", "aten::squeeze.dim",
    "aten::narrow.default",
)
INPLACE_OPS = ("aten::add_.Tensor", "aten::mul_.Scalar", "aten::copy_.default")
POINTWISE_OPS = ("aten::add.Tensor", "aten::mul.Tensor", "aten::neg.default", "aten::relu.default")
MATMUL_OPS = ("aten::mm.default", "aten::addmm.default", "aten::linear.default", "aten::bmm.default")


@dataclass(frozen=True)
class Call:
    """``result = target(*args, **kwargs)``; ``result`` is ``None`` for in-place calls (their value is
    their first argument)."""

    target: Any
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    result: str | None


@dataclass(frozen=True)
class Program:
    """A drawn program; ``form`` (``fx``, ``export``, ``edge``) says what :meth:`build` makes and
    ``dialect`` whether an ``fx`` graph calls ATen or edge-dialect ops."""

    inputs: tuple[tuple[str, TensorRecipe], ...]
    buffers: tuple[tuple[str, TensorRecipe], ...]
    calls: tuple[Call, ...]
    outputs: tuple[str, ...]
    form: str = "fx"
    dialect: str = "aten"

    def __repr__(self) -> str:

        return program_summary(self)

    # -- building -------------------------------------------------------------------------------
    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Fresh input tensors (an in-place write in one run must not reach the next)."""
        return tuple(recipe.build() for _, recipe in self.inputs)

    def _exec(self, source: str) -> dict:
        namespace: dict = {}
        exec(compile(source, f"<shimkit program {id(self):x}>", "exec"), namespace)  # noqa: S102
        return namespace

    def module(self) -> torch.nn.Module:
        """The program as an eager ``nn.Module`` (buffers registered, fresh on every call)."""

        return self._exec(module_source(self))["Program"]()

    def graph_module(self) -> torch.fx.GraphModule:
        """The program as an FX graph (in-place and view ops kept), with ``meta["val"]`` filled."""

        gm = self._exec(graph_module_source(self))["build_graph_module"]()
        fill_meta(gm, self.example_inputs())
        return gm

    def exported_program(self) -> torch.export.ExportedProgram:
        return torch.export.export(self.module(), self.example_inputs())

    def edge_program(self) -> torch.export.ExportedProgram:
        from executorch.exir import EdgeCompileConfig, to_edge

        config = EdgeCompileConfig(_check_ir_validity=False)
        return to_edge(self.exported_program(), compile_config=config).exported_program()

    def build(self) -> Any:
        """A fresh artifact of this program's ``form``."""
        if self.form == "fx":
            return self.graph_module()
        if self.form == "export":
            return self.exported_program()
        return self.edge_program()

    def to_python(self, transform: Any = None, failure: str | None = None) -> str:
        """A runnable script that builds this program (and applies ``transform`` to it)."""

        return script(self, transform, failure)


def fill_meta(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> None:
    """Set ``meta["val"]`` on every node by running the graph on fake tensors, as export does."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    values = fake_values(gm, inputs, FakeTensorMode(allow_non_fake_inputs=True))
    for node, value in values.items():
        node.meta["val"] = value


def fake_values(gm: torch.fx.GraphModule, inputs: Sequence[Any], mode) -> dict:
    """Each node's value when ``gm`` runs on fake copies of ``inputs`` (and of its buffers)."""
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            values[node] = result
            return result

        def get_attr(self, target, args, kwargs):
            return mode.from_tensor(super().get_attr(target, args, kwargs))

    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    with mode:
        Recorder(gm).run(*fakes)
    return values


# -- generation ------------------------------------------------------------------------------------

@dataclass
class _Value:
    name: str
    meta: torch.Tensor  # on the meta device: shape, dtype and strides, no data
    base: str  # the storage it lives in: an input, a buffer or the call that allocated it
    writable: bool  # False where elements overlap (expand): an in-place write there is an error
    is_leaf: bool  # an input or buffer


def _meta_of(recipe: TensorRecipe) -> torch.Tensor:
    real = recipe.build()
    return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="meta")


def _overlaps(value: torch.Tensor) -> bool:
    return any(stride == 0 and side > 1 for stride, side in zip(value.stride(), value.shape))


class _Drawing:
    """The program under construction."""

    def __init__(self, draw, dtype: torch.dtype, layouts: bool, max_inputs: int, form: str = "fx") -> None:
        self.draw, self.dtype, self.layouts, self.max_inputs, self.form = draw, dtype, layouts, max_inputs, form
        self.values: list[_Value] = []
        self.inputs: list[tuple[str, TensorRecipe]] = []
        self.buffers: list[tuple[str, TensorRecipe]] = []
        self.calls: list[Call] = []
        self.used: set[str] = set()
        self.counter = 0

    def fresh_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def add_leaf(self, recipe: TensorRecipe, kind: str) -> _Value:
        name = self.fresh_name("x" if kind == "input" else "buf")
        (self.inputs if kind == "input" else self.buffers).append((name, recipe))
        value = _Value(name, _meta_of(recipe), name, not recipe.overlaps, True)
        self.values.append(value)
        return value

    def new_input(self, shape: Sequence[int] | None = None, recipe: TensorRecipe | None = None) -> _Value:
        if recipe is None:
            recipe = self.draw(tensor_recipes(shapes(0, 4) if shape is None else shape, self.dtype,
                                              layouts=self.layouts, allow_overlap=True))
        return self.add_leaf(recipe, "input")

    def can_add_input(self) -> bool:
        return len(self.inputs) < self.max_inputs

    def tensor(self, wanted: TensorArg, avoid_base: str | None) -> _Value | None:
        """An existing value of the wanted shape (not sharing ``avoid_base``), or a new input."""
        candidates = [v for v in self.values if tuple(v.meta.shape) == wanted.shape
                      and v.meta.dtype == (wanted.recipe.dtype if wanted.recipe else self.dtype)
                      and v.base != avoid_base]
        if candidates and (not self.can_add_input() or self.draw(st.booleans())):
            return self.draw(st.sampled_from(candidates))
        if not self.can_add_input():
            return None
        return self.new_input(wanted.shape, wanted.recipe)

    def repeatable_calls(self) -> list[Call]:
        """Earlier calls with one tensor result (calls that only write, or return lists, are not)."""
        single = {v.name for v in self.values}
        return [c for c in self.calls if c.result in single and c.target is not operator.getitem]

    def repeat(self, call: Call) -> None:
        original = next(v for v in self.values if v.name == call.result)
        name = self.fresh_name("v")
        self.calls.append(Call(call.target, call.args, call.kwargs, name))
        base = original.base if original.base != original.name else name
        self.values.append(_Value(name, original.meta, base, original.writable, False))
        self.used.update(a.name for a in call.args if isinstance(a, Ref))

    def add_call(self, spec: OpSpec) -> bool:
        """Draw one call of ``spec``; False when no valid call fits the program as it stands."""
        self_value = None
        if not spec.self_free:
            candidates = [v for v in self.values if spec.accepts(v.meta)
                          and (v.writable or not spec.mutates_self)]
            if candidates and (not self.can_add_input() or self.draw(st.integers(0, 3)) > 0):
                self_value = self.draw(st.sampled_from(candidates))
            elif self.can_add_input():
                shape_strategy = shapes(*spec.ranks).filter(
                    lambda s: spec.accepts(torch.empty(s, device="meta")))
                self_value = self.new_input(self.draw(shape_strategy))
                if not spec.accepts(self_value.meta) or (spec.mutates_self and not self_value.writable):
                    return False
            else:
                return False
        args, kwargs = self.draw(spec.arguments(self_value.meta if self_value else None))
        avoid = self_value.base if spec.mutates_self and self_value is not None else None  # in-place ops refuse aliased operands
        chosen: list[_Value] = [self_value] if self_value else []

        def resolve(item):
            if item is SELF:
                return Ref(self_value.name)
            if isinstance(item, TensorArg):
                value = self.tensor(item, avoid)
                if value is None:
                    raise _NoRoom
                chosen.append(value)
                return Ref(value.name)
            if isinstance(item, (list, tuple)):
                return type(item)(resolve(i) for i in item)
            return item

        try:
            args, kwargs = resolve(args), {k: resolve(v) for k, v in kwargs.items()}
        except _NoRoom:
            return False
        metas = {v.name: v.meta for v in chosen}
        if self.form == "edge" and spec.op is torch.ops.aten.copy_.default and len(chosen) == 2 \
                and chosen[0].meta.shape != chosen[1].meta.shape:
            # to_edge (ExecuTorch 1.x) replaces a broadcasting copy_ by its source, so the ops that read the
            # written tensor get the source's shape and the program does not build at all.
            return False
        if self.form == "edge" and spec.op is torch.ops.aten.unbind_copy.int and self_value is not None \
                and self_value.meta.dim() == 1:
            # to_edge (ExecuTorch 1.5) fails on unbind_copy of a 1-D tensor ("len() of a 0-d tensor").
            return False
        try:
            result = spec.op(*_substitute(args, metas), **_substitute(kwargs, metas))
        except (RuntimeError, ValueError, IndexError, TypeError):
            # The specs are exact for what they cover; dtype promotion corners (an in-place write
            # of a float scalar into an int tensor) are left to this check.
            return False
        self.used.update(v.name for v in chosen)
        if spec.mutates_self:
            self.calls.append(Call(spec.op, args, tuple(kwargs.items()), None))
            return True
        name = self.fresh_name("v")
        self.calls.append(Call(spec.op, args, tuple(kwargs.items()), name))
        base = self_value.base if spec.is_view and self_value else name
        writable = self_value.writable if spec.is_view and self_value else True
        if isinstance(result, torch.Tensor):
            self.values.append(_Value(name, result, base, writable and not _overlaps(result), False))
            return True
        for index, item in enumerate(result):
            item_name = self.fresh_name("v")
            self.calls.append(Call(operator.getitem, (Ref(name), index), (), item_name))
            self.values.append(_Value(item_name, item, base, writable and not _overlaps(item), False))
        self.used.add(name)
        return True


@st.composite
def _one_call(draw, drawing: _Drawing, specs: Sequence[OpSpec]) -> bool:
    """One more call; False when the drawn call does not fit the program."""
    drawing.draw = draw  # draws inside this span belong to it
    repeatable = drawing.repeatable_calls()
    if repeatable and draw(st.integers(0, 5)) == 5:
        # A literal common subexpression: what CSE-style passes match, and may merge wrongly.
        drawing.repeat(draw(st.sampled_from(repeatable)))
        return True
    return drawing.add_call(draw(st.sampled_from(specs)))


class _NoRoom(Exception):
    """A call needs a new input but the program already has the most it may."""


def _substitute(value, metas: dict):
    if isinstance(value, Ref):
        return metas[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_substitute(v, metas) for v in value)
    if isinstance(value, dict):
        return {k: _substitute(v, metas) for k, v in value.items()}
    return value


@st.composite
def graphs(draw, ops: Sequence[Any] = VIEW_COPY_OPS + INPLACE_OPS + POINTWISE_OPS, *,
           max_calls: int = 6, max_inputs: int = 4, max_buffers: int = 1, max_outputs: int = 3,
           dtype: torch.dtype | st.SearchStrategy = torch.float32, layouts: bool = True,
           form: str = "fx", dialect: str = "aten", registry=None) -> Program:
    """A random well-typed :class:`Program` calling ``ops`` (names, overloads, edge ops or OpSpecs).

    ``form`` picks what the properties build: an ``fx`` GraphModule (cheap; in-place and view ops as
    drawn, ``dialect`` ``aten`` or ``edge``), a torch.export ``export`` ExportedProgram, or an ``edge``
    program (``to_edge``: functional, mutations as outputs written back). ``layouts=False`` keeps
    inputs contiguous. Ops of registered plugins draw their arguments from the plugin's
    ``input_strategies``.
    """
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {FORMS}")
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")
    if not ops:
        raise ValueError("graphs() needs at least one op")
    specs = [op if isinstance(op, OpSpec) else op_spec(op, registry) for op in ops]
    if isinstance(dtype, st.SearchStrategy):
        dtype = draw(dtype)
    drawing = _Drawing(draw, dtype, layouts, max_inputs, form)
    for _ in range(draw(st.integers(0, max_buffers))):
        drawing.add_leaf(draw(tensor_recipes(shapes(0, 3), dtype, layouts=False)), "buffer")
    # Inputs are created as calls need them, so each fits the op that first reads it. Each call is
    # one span of choices, which hypothesis can delete whole when shrinking.
    wanted, made = draw(st.integers(1, max_calls)), 0
    for _ in range(3 * wanted):
        if made == wanted:
            break
        made += draw(_one_call(drawing, specs))
    assume(made > 0)
    computed = [v for v in drawing.values if not v.is_leaf]
    # Unused results must be outputs or their calls are dead; the latest are kept, as they depend on
    # the most. The rest are outputs by chance.
    unused = [v.name for v in computed if v.name not in drawing.used]
    others = [v.name for v in computed if v.name in drawing.used]
    outputs = unused[-max_outputs:]
    if others and len(outputs) < max_outputs:
        outputs += draw(st.lists(st.sampled_from(others), max_size=max_outputs - len(outputs), unique=True))
    if not outputs:
        # Only in-place calls: the written leaves are what the program computes.
        outputs = [drawing.values[0].name]
    return Program(tuple(drawing.inputs), tuple(drawing.buffers), tuple(drawing.calls), tuple(outputs),
                   form, dialect)
