"""How to call an op with valid arguments, derived from its schema.

An :class:`OpSpec` turns the shape of the op's first tensor (``self``) into a strategy of argument
templates: ``SELF`` where that tensor goes, :class:`TensorArg` where another tensor of a given shape is
needed (a graph fills it with an existing value of that shape or a new input), plain Python values
elsewhere. Most specs are derived from the schema by argument name and type (``int dim`` is a valid
dim of ``self``, ``SymInt[] split_sizes`` sums to the side split, ``Tensor other`` broadcasts to
``self``...); ops whose arguments constrain each other across tensors (``mm``, ``addmm``, ``linear``,
``cat``) have hand-written specs; ops of third-party plugins use the ``input_strategies`` their
:class:`~shimkit.registry.OpPlugin` records, which always win over derivation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from hypothesis import strategies as st

from shimkit.backend import get_registry
from shimkit.registry import UnknownOpError, as_call, canonical_op_name, resolve_op
from shimkit.testing.strategies import TensorRecipe, broadcastable_shapes, shapes, tensor_recipes


class UnsupportedOpError(ValueError):
    """No spec can be derived for an op: its schema has an argument no rule understands."""


class _Self:
    def __repr__(self) -> str:
        return "SELF"


SELF = _Self()


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument still to be chosen: of ``shape`` and self's dtype.

    ``recipe`` pins the exact tensor (a plugin's input strategy drew it); a graph then makes it an
    input, or reuses an existing value of the same shape and dtype.
    """

    shape: tuple[int, ...]
    recipe: TensorRecipe | None = None


@dataclass(frozen=True)
class OpSpec:
    """Valid calls of ``op``.

    ``ranks`` bounds the rank of ``self``; ``needs_nonempty`` says that ``self`` needs a non-zero side
    (``select`` indexes one); ``arguments(self)`` is a strategy of ``(args, kwargs)`` templates for
    that ``self`` tensor (a meta tensor will do: only its shape and strides are read), or ``None`` when
    no valid call exists for it. ``self_free`` specs (from a plugin's input strategy) draw every tensor
    themselves and ignore ``self``.
    """

    op: torch._ops.OpOverload
    arguments: Callable[[torch.Tensor], st.SearchStrategy | None]
    ranks: tuple[int, int] = (0, 4)
    self_free: bool = False
    doc: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return canonical_op_name(self.op)

    @property
    def mutates_self(self) -> bool:
        arguments = self.op._schema.arguments
        return bool(arguments) and arguments[0].alias_info is not None and arguments[0].alias_info.is_write

    @property
    def is_view(self) -> bool:
        returns = self.op._schema.returns
        return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write

    def accepts(self, value: torch.Tensor) -> bool:
        return (not self.self_free and self.ranks[0] <= value.dim() <= self.ranks[1]
                and self.arguments(value) is not None)


# -- argument rules --------------------------------------------------------------------------------

_DIM_NAMES = ("dim", "dim0", "dim1", "dim2", "dimension")
_SCALARS = st.sampled_from((2, -1, 0, 3, 0.5))


def _index_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _dims(rank: int) -> st.SearchStrategy[int]:
    """A dim of a tensor of ``rank``, in either sign (a pass must normalise negative dims)."""
    return st.sampled_from(list(range(rank)) + list(range(-rank, 0)))


@st.composite
def _composition(draw, total: int) -> list[int]:
    """Split sizes summing to ``total``."""
    parts, left = [], total
    while left > 0:
        part = draw(st.integers(1, left))
        parts.append(part)
        left -= part
    return parts


def _view_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes the elements of ``shape`` can be viewed as: merges, splits and new unit dims."""
    numel = math.prod(shape)
    candidates = {shape, (numel,), (*shape, 1), (1, *shape)}
    for i in range(len(shape) - 1):
        candidates.add((*shape[:i], shape[i] * shape[i + 1], *shape[i + 2:]))
    for i, side in enumerate(shape):
        for factor in range(2, side):
            if side % factor == 0:
                candidates.add((*shape[:i], factor, side // factor, *shape[i + 1:]))
    return sorted(candidates)


def _viewable_shapes(value: torch.Tensor) -> list[tuple[int, ...]]:
    """The :func:`_view_shapes` that ``view`` accepts for ``value``'s strides (non-contiguous inputs
    refuse most)."""
    viewable = []
    for shape in _view_shapes(tuple(value.shape)):
        try:
            value.view(shape)
        except RuntimeError:
            continue
        viewable.append(shape)
    return viewable


@st.composite
def _draw_template(draw, value: torch.Tensor, arguments: list, rules: dict) -> tuple[tuple, dict]:
    shape = tuple(value.shape)
    # ``chosen`` holds effective values (defaults where omitted): later rules read them.
    chosen: dict[str, Any] = {"self": value}
    omitted: set[str] = set()
    # Dims first: split sizes, indices and slice bounds depend on the side they index.
    for argument in sorted(arguments[1:], key=lambda a: a.name not in _DIM_NAMES):
        drawn = draw(rules[argument.name](shape, chosen))
        if drawn is _OMIT:
            omitted.add(argument.name)
            drawn = argument.default_value
        chosen[argument.name] = drawn
    positional = [a for a in arguments[1:] if not a.kwarg_only]
    while positional and positional[-1].name in omitted:
        positional.pop()  # trailing defaults are left out, as people write the call
    args = (SELF, *(chosen[a.name] for a in positional))
    kwargs = {a.name: chosen[a.name] for a in arguments[1:] if a.kwarg_only and a.name not in omitted}
    return args, kwargs


def _derived_arguments(op: torch._ops.OpOverload) -> Callable[[tuple[int, ...]], st.SearchStrategy | None]:
    """Argument templates from the schema, by argument name and type; raises for unknown arguments."""
    schema = op._schema
    arguments = list(schema.arguments)
    if not arguments or str(arguments[0].type) != "Tensor":
        raise UnsupportedOpError(f"{schema.name}: the first argument is not a Tensor")
    base = schema.name.split("::")[1].rstrip("_").removesuffix("_copy")
    rules = {}
    for argument in arguments[1:]:
        rules[argument.name] = _rule(schema.name, base, argument)

    def arguments_for(value: torch.Tensor) -> st.SearchStrategy | None:
        shape = tuple(value.shape)
        rank = len(shape)
        if any(a.name in _DIM_NAMES and str(a.type) in ("int", "SymInt") for a in arguments[1:]) and rank == 0:
            return None
        if base == "select" and not any(shape):
            return None

        return _draw_template(value, arguments, rules)

    return arguments_for


class _Omit:
    def __repr__(self) -> str:
        return "OMIT"


_OMIT = _Omit()


def _rule(schema_name: str, base: str, argument: torch._C.Argument):
    name, kind = argument.name, str(argument.real_type)
    has_default = argument.has_default_value()

    def optional(rule):
        """Use the default sometimes, so passes see both spellings of the same call."""
        if not has_default:
            return rule
        return lambda shape, chosen: st.one_of(st.just(_OMIT), rule(shape, chosen))

    def side(shape, chosen, key="dim"):
        return shape[_index_dim(chosen[key], len(shape))] if shape else 1

    if name in _DIM_NAMES and kind in ("int", "SymInt"):
        if base == "unsqueeze":
            return lambda shape, chosen: st.sampled_from(list(range(-len(shape) - 1, len(shape) + 1)))
        if base == "diagonal" and name == "dim2":
            return lambda shape, chosen: _dims(len(shape)).filter(
                lambda d: _index_dim(d, len(shape)) != _index_dim(chosen["dim1"], len(shape)))
        if base == "select":
            return lambda shape, chosen: st.sampled_from([d for d in range(len(shape)) if shape[d]])
        return optional(lambda shape, chosen: _dims(len(shape)))
    if name == "dims" and kind == "List[int]":
        return lambda shape, chosen: st.permutations(range(len(shape))).map(list)
    if name == "dim" and kind in ("List[int]", "Optional[List[int]]"):
        return lambda shape, chosen: st.sets(st.integers(0, len(shape) - 1)).map(sorted) if shape else st.just([])
    if name == "split_size":
        return lambda shape, chosen: st.integers(1, max(side(shape, chosen), 1))
    if name == "split_sizes":
        return lambda shape, chosen: _composition(side(shape, chosen))
    if base == "slice" and name in ("start", "end"):
        return optional(lambda shape, chosen: st.one_of(
            st.none(), st.integers(-side(shape, chosen), side(shape, chosen))))
    if base == "slice" and name == "step":
        return optional(lambda shape, chosen: st.integers(1, 3))
    if base == "narrow" and name == "start":
        return lambda shape, chosen: st.integers(0, side(shape, chosen))
    if base == "narrow" and name == "length":
        return lambda shape, chosen: st.integers(0, side(shape, chosen) - chosen["start"])
    if base == "select" and name == "index":
        return lambda shape, chosen: st.integers(-side(shape, chosen), side(shape, chosen) - 1)
    if base == "diagonal" and name == "offset":
        return optional(lambda shape, chosen: st.integers(-2, 2))
    if base == "unfold" and name == "size":
        return lambda shape, chosen: st.integers(0, side(shape, chosen, "dimension"))
    if base == "unfold" and name == "step":
        return lambda shape, chosen: st.integers(1, 3)
    if base == "view" and name == "size":
        return lambda shape, chosen: st.sampled_from(_viewable_shapes(chosen["self"])).map(list)
    if base == "expand" and name == "size":
        return lambda shape, chosen: st.tuples(
            st.lists(st.integers(1, 3), max_size=1),
            st.tuples(*[st.sampled_from((s, -1)) if s != 1 else st.sampled_from((1, -1, 2, 3))
                        for s in shape])).map(lambda parts: [*parts[0], *parts[1]])
    if kind == "Tensor" and name in ("other", "src", "end", "weight"):
        return lambda shape, chosen: broadcastable_shapes(tuple(shape)).map(TensorArg)
    if kind in ("Scalar", "number"):  # TorchScript spells Scalar "number"
        return optional(lambda shape, chosen: _SCALARS)
    if kind == "bool":
        return optional(lambda shape, chosen: st.booleans()) if name == "keepdim" else (
            lambda shape, chosen: st.just(_OMIT))
    if has_default and kind in ("Optional[ScalarType]", "Optional[MemoryFormat]", "Optional[Layout]",
                                "Optional[Device]", "Optional[bool]"):
        return lambda shape, chosen: st.just(_OMIT)
    raise UnsupportedOpError(
        f"{schema_name}: no rule for argument `{kind} {name}`; give the op's OpPlugin an "
        f"input_strategies entry, or pass an OpSpec")


# -- hand-written specs for ops whose tensors constrain each other ---------------------------------

_SIDES = st.integers(1, 4)


def _mm(value):
    shape = value.shape
    return _SIDES.map(lambda n: ((SELF, TensorArg((shape[1], n))), {}))


def _bmm(value):
    shape = value.shape
    return _SIDES.map(lambda n: ((SELF, TensorArg((shape[0], shape[2], n))), {}))


@st.composite
def _addmm_template(draw, value):
    shape = value.shape
    # self is the bias: it broadcasts to (n, m), so its non-unit sides fix n and m.
    full = [1] * (2 - len(shape)) + list(shape)
    n = full[0] if full[0] != 1 else draw(_SIDES)
    m = full[1] if full[1] != 1 else draw(_SIDES)
    k = draw(_SIDES)
    kwargs = {}
    for key in ("beta", "alpha"):
        if draw(st.booleans()):
            kwargs[key] = draw(_SCALARS)
    return (SELF, TensorArg((n, k)), TensorArg((k, m))), kwargs


@st.composite
def _linear_template(draw, value):
    shape = value.shape
    out = draw(_SIDES)
    bias = draw(st.sampled_from(("none", "omit", "tensor")))
    args = [SELF, TensorArg((out, shape[-1]))]
    if bias == "none":
        args.append(None)
    elif bias == "tensor":
        args.append(TensorArg((out,)))
    return tuple(args), {}


@st.composite
def _cat_template(draw, value):
    shape = value.shape
    dim = draw(_dims(len(shape)))
    others = draw(st.lists(st.integers(0, 3), max_size=2))
    index = _index_dim(dim, len(shape))
    tensors = [SELF] + [TensorArg((*shape[:index], side, *shape[index + 1:])) for side in others]
    return ((tensors, dim) if dim or draw(st.booleans()) else (tensors,)), {}


# Rank limits the schema does not state: ``t`` takes at most 2-D, ``diagonal`` at least 2-D.
_RANKS = {"t": (0, 2), "diagonal": (2, 4)}

_HAND_WRITTEN: dict[str, tuple[Callable, tuple[int, int]]] = {
    "aten::mm.default": (_mm, (2, 2)),
    "aten::bmm.default": (_bmm, (3, 3)),
    "aten::addmm.default": (_addmm_template, (0, 2)),
    "aten::linear.default": (_linear_template, (1, 3)),
    "aten::cat.default": (_cat_template, (1, 4)),
}


def _registry_spec(op: torch._ops.OpOverload, strategy_factory: Callable[[], st.SearchStrategy]) -> OpSpec:
    """A spec from a plugin's input strategy: concrete argument tuples, tensors pinned as recipes."""
    def pinned(value: Any) -> Any:
        return TensorArg(tuple(value.shape), recipe_of(value)) if isinstance(value, torch.Tensor) else value

    def to_template(value: Any) -> tuple[tuple, dict]:
        args, kwargs = as_call(value)
        return tuple(map(pinned, args)), {name: pinned(v) for name, v in kwargs.items()}

    return OpSpec(op, lambda value: strategy_factory().map(to_template), self_free=True,
                  doc="from the plugin's input_strategies")


def recipe_of(tensor: torch.Tensor) -> TensorRecipe:
    """A contiguous recipe holding ``tensor``'s values (so a graph or script can rebuild it)."""
    flat = tensor.detach().contiguous().reshape(-1)
    values = tuple(flat.tolist())
    return TensorRecipe(tensor.dtype, values, 0, tuple(tensor.shape), False, (), None, tuple(tensor.shape))


def op_spec(op: Any, registry=None) -> OpSpec:
    """The spec for ``op``: the registry's input strategy, a hand-written one, or the schema's.

    ``op`` is an ``OpOverload``, an edge-dialect op or a name (``"aten::slice_copy.Tensor"``).
    """
    overload = _overload(op)
    name = canonical_op_name(overload)
    registry = registry if registry is not None else get_registry()
    for entry in registry.op_plugins():
        factory = entry.record.input_strategies.get(name)
        if factory is not None:
            return _registry_spec(overload, factory)
    if name in _HAND_WRITTEN:
        arguments, ranks = _HAND_WRITTEN[name]
        return OpSpec(overload, arguments, ranks)
    base = overload._schema.name.split("::")[1].rstrip("_").removesuffix("_copy")
    return OpSpec(overload, _derived_arguments(overload), _RANKS.get(base, (0, 4)))


def _overload(op: Any) -> torch._ops.OpOverload:
    inner = getattr(op, "_op", None)  # an edge-dialect EdgeOpOverload wraps the ATen overload
    if isinstance(inner, torch._ops.OpOverload):
        return inner
    if isinstance(op, torch._ops.OpOverload):
        return op
    try:
        return resolve_op(op)
    except UnknownOpError as error:
        raise UnsupportedOpError(str(error)) from None


def fill_template(draw, template: tuple[tuple, dict], self_tensor: torch.Tensor, dtype: torch.dtype,
                  layouts: bool = True) -> tuple[tuple, dict]:
    """Replace ``SELF`` and ``TensorArg`` markers with tensors (used outside graphs)."""
    def fill(value):
        if value is SELF:
            return self_tensor
        if isinstance(value, TensorArg):
            recipe = value.recipe or draw(tensor_recipes(value.shape, dtype, layouts=layouts))
            return recipe.build()
        if isinstance(value, (list, tuple)):
            return type(value)(fill(v) for v in value)
        return value

    args, kwargs = template
    return fill(args), {k: fill(v) for k, v in kwargs.items()}


@st.composite
def op_arguments(draw, op: Any, dtype: torch.dtype = torch.float32, layouts: bool = True, registry=None
                 ) -> tuple[tuple, dict]:
    """Concrete ``(args, kwargs)`` for a valid call of ``op``: self, its other tensors and the rest."""
    spec = op_spec(op, registry)
    if spec.self_free:
        return fill_template(draw, draw(spec.arguments(None)), None, dtype, layouts)
    self_tensor = draw(tensor_recipes(shapes(*spec.ranks), dtype, layouts=layouts).map(
        TensorRecipe.build).filter(spec.accepts))
    return fill_template(draw, draw(spec.arguments(self_tensor)), self_tensor, dtype, layouts)
