"""``torch.unique``/``unique_consecutive``, ``torch.sort(stable=True)`` and ``torch.i0`` past ``to_edge``
(plugins/unique.py, plugins/sort_stable.py, plugins/bessel_i0.py; issue 48 part 4).

Each decomposition is checked against ATen on every OpInfo sample of its op, on hypothesis inputs at the
drawn and at other (dynamic) sizes, and on the semantics its docstring promises; models are lowered end to
end: on Metal through the audit (stock stops at ``to_edge``, shimkit is clean with eager's numbers), on CUDA
as far as a CPU goes (the registry's CUDA configuration and stock ``to_edge`` with the AOTI partitioner's
rules: the stop, then the program that gets past it, run against eager)."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.backend import backend_config, new_registry
from shimkit.passes import DecomposeInPlace
from shimkit.plugins.bessel_i0 import i0_decomposition
from shimkit.plugins.sort_stable import sort_stable_decomposition
from shimkit.plugins.unique import (MAX_ROW_LENGTH, unique_consecutive_decomposition, unique_decomposition,
                                    unique_dim_decomposition)
from shimkit.registry import DecompositionDeclined
from shimkit.testing import assert_plugin_matches_reference
from passes_helpers import Decomposing, assert_stops_stock_and_lowers_clean_for_metal

OPS = {op.name: op for op in op_db if not op.variant_test_name}
NAN, INF = float("nan"), float("inf")
UNIQUE_OPS = (torch.ops.aten._unique2.default, torch.ops.aten.unique_dim.default,
              torch.ops.aten.unique_consecutive.default)
SORT_STABLE, I0 = torch.ops.aten.sort.stable, torch.ops.aten.i0.default



def _assert_same(actual, expected, tolerance=None):
    """Equal results (tuples of them too): dtypes, shapes and values, NaN where ATen has NaN; bit for bit
    unless ``tolerance`` (``assert_close``'s ``rtol``/``atol``; ``{}`` for its defaults) says otherwise."""
    actual, expected = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in (actual, expected))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        torch.testing.assert_close(got, want, equal_nan=True, **({"rtol": 0, "atol": 0} if tolerance is None
                                                                  else tolerance))


# -- OpInfo samples ---------------------------------------------------------------------------------------

INTEGRAL_AND_FLOATING = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool]


@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
@pytest.mark.parametrize("dtype", INTEGRAL_AND_FLOATING)
def test_unique_matches_aten_on_every_opinfo_sample(name, dtype):
    """Values, inverse and counts equal ATen's on all of OpInfo's samples (every flag, ``dim`` absent, 0 or
    -1, 0-d to 3-d, empty ones too), bit for bit; ``dim`` samples reach ``unique_dim`` and
    ``unique_consecutive(dim=)``."""
    op = OPS[name]
    mode = Decomposing(backend_config("mps").pre_edge_decomposition_table)
    checked = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        expected = op.op(sample.input, *sample.args, **sample.kwargs)
        with mode:
            actual = op.op(sample.input, *sample.args, **sample.kwargs)
        _assert_same(actual, expected)
        checked += 1
    assert checked > 100
    wanted = {torch.ops.aten._unique2.default, torch.ops.aten.unique_dim.default} if name == "unique" else {
        torch.ops.aten.unique_consecutive.default}
    assert mode.used == wanted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_sort_stable_matches_aten_on_every_opinfo_sample(dtype):
    """Every OpInfo sample that reaches ``sort.stable`` (``stable=`` given): values bit for bit and the stable
    indices ATen returns for ``stable=True`` (a ``stable=False`` request gets the stable order too)."""
    mode = Decomposing(backend_config("cuda").pre_edge_decomposition_table)
    reached = 0
    for sample in OPS["sort"].sample_inputs("cpu", dtype, requires_grad=False):
        mode.used.clear()
        with mode:
            actual = torch.sort(sample.input, *sample.args, **sample.kwargs)
        if not mode.used:
            continue  # sort.default: core ATen, not ours
        kwargs = {**sample.kwargs, "stable": True}
        _assert_same(tuple(actual), tuple(torch.sort(sample.input, *sample.args, **kwargs)))
        reached += 1
    assert reached >= 25


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.uint8, torch.bool])
def test_i0_matches_aten_on_every_opinfo_sample_on_cuda(dtype):
    mode = Decomposing(backend_config("cuda").pre_edge_decomposition_table)
    op = OPS["i0"]
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        with mode:
            actual = op.op(sample.input)
        _assert_same(actual, op.op(sample.input), _i0_tolerance(actual.dtype))
    assert mode.used == {I0}


# -- hypothesis: drawn inputs at the drawn and at other (dynamic) sizes ---------------------------------------

@pytest.mark.parametrize("plugin", ["unique", "sort-stable", "bessel-i0"])
def test_hypothesis_inputs_match_aten_at_dynamic_sizes(plugin):
    from hypothesis import settings

    # A few examples here (each one is exported and run at several sizes); test_testing_dynamic.py draws
    # the profile's full count for every built-in plugin.
    assert_plugin_matches_reference(plugin, settings=settings(max_examples=12, deadline=None))


# -- the semantics each docstring promises ----------------------------------------------------------------

def test_unique_gives_each_nan_its_own_value_and_keeps_the_first_zero():
    x = torch.tensor([3.0, NAN, 1.0, NAN, 0.0, -0.0, 1.0, 3.0, -INF, INF])
    values, inverse, counts = unique_decomposition(x, True, True, True)
    expected = torch._unique2(x, True, True, True)
    _assert_same((values, inverse, counts), expected)
    assert values.isnan().sum() == 2 and counts[values.isnan()].tolist() == [1, 1]
    assert inverse[1] != inverse[3]  # two NaNs, two values
    assert not values[1].signbit() and unique_decomposition(-x, True)[0][1].signbit()  # first of -0.0 and 0.0
    # Many NaNs: each its own value, in input order (ATen's unstable sort orders them its own way).
    many = torch.tensor([NAN, 2.0] * 20)
    values, inverse, counts = unique_decomposition(many, True, True, True)
    assert values.shape == (21,) and counts.tolist() == [20] + [1] * 20
    assert inverse[0::2].tolist() == list(range(1, 21)) and set(inverse[1::2].tolist()) == {0}
    aten_inverse = torch._unique2(many, True, True, True)[1]
    assert sorted(aten_inverse[0::2].tolist()) == inverse[0::2].tolist()


def test_unique_keeps_atens_shapes_dtypes_and_empty_outputs():
    for x in (torch.tensor(5.0), torch.zeros(0, 3), torch.tensor([[True, False], [True, True]]),
              torch.tensor([7, -1, 7], dtype=torch.int32), torch.tensor([0.5, 0.5, -1.0], dtype=torch.bfloat16)):
        for flags in ((False, False), (True, False), (False, True), (True, True)):
            _assert_same(unique_decomposition(x, True, *flags), torch._unique2(x, True, *flags))
            _assert_same(unique_consecutive_decomposition(x, *flags),
                         torch.ops.aten.unique_consecutive.default(x, *flags))
    assert unique_decomposition(torch.tensor(5.0), True, True)[1].shape == ()
    rows = torch.tensor([[1, 2], [1, 2], [0, 9]])
    for dim in (0, 1, -1):
        _assert_same(unique_dim_decomposition(rows, dim), torch.ops.aten.unique_dim.default(rows, dim))
        _assert_same(unique_consecutive_decomposition(rows, False, False, dim),
                     torch.ops.aten.unique_consecutive.default(rows, False, False, dim))
    empty = torch.zeros(0, 3)
    _assert_same(unique_dim_decomposition(empty, 0, True, True, True), torch.ops.aten.unique_dim.default(empty, 0))
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        unique_dim_decomposition(torch.zeros(2, 0), 0)
    with pytest.raises(IndexError, match="no dimensions"):
        unique_dim_decomposition(torch.tensor(1.0), 0)
    with pytest.raises(DecompositionDeclined, match="complex"):
        unique_decomposition(torch.ones(2, dtype=torch.complex64))


def test_unique_dim_declines_rows_too_long_or_unbounded_and_sorts_bounded_ones():
    with pytest.raises(DecompositionDeclined, match=f"at most {MAX_ROW_LENGTH}"):
        unique_dim_decomposition(torch.zeros(3, MAX_ROW_LENGTH + 1), 0)

    class UniqueRows(torch.nn.Module):
        def forward(self, x):
            return torch.unique(x, dim=0, return_inverse=True, return_counts=True)

    x = torch.tensor([[1, 2, 2], [0, 5, 5], [1, 2, 2], [1, 1, 1]])
    table = {torch.ops.aten.unique_dim.default: unique_dim_decomposition}
    unbounded = torch.export.export(UniqueRows(), (x,), dynamic_shapes=({0: torch.export.Dim("rows"),
                                                                         1: torch.export.Dim("width")},))
    DecomposeInPlace(table)(unbounded)
    declined = [n.meta["shimkit_declined"] for n in unbounded.graph.nodes if "shimkit_declined" in n.meta]
    assert declined and "no upper bound" in declined[0]
    bounded = torch.export.export(UniqueRows(), (x,), dynamic_shapes=({0: torch.export.Dim("rows"),
                                                                       1: torch.export.Dim("width", max=6)},))
    DecomposeInPlace(table)(bounded)
    assert torch.ops.aten.unique_dim.default not in {n.target for n in bounded.graph.nodes}
    generator = torch.Generator().manual_seed(0)
    for rows, width in ((5, 6), (7, 2), (3, 1), (9, 4)):  # one program, right at every width up to the bound
        y = torch.randint(0, 2, (rows, width), generator=generator)
        _assert_same(bounded.module()(y), UniqueRows()(y))


def test_sort_stable_is_the_stable_argsort_and_a_gather_with_bit_exact_values():
    x = torch.tensor([[2.0, NAN, -0.0, 0.0, 1.0, 2.0, -INF], [NAN, 0.0, -0.0, 5.0, 5.0, NAN, 1.0]])
    for descending in (False, True):
        for stable in (None, False, True):
            values, indices = sort_stable_decomposition(x, stable=stable, dim=1, descending=descending)
            expected = torch.sort(x, stable=True, dim=1, descending=descending)
            _assert_same((values, indices), tuple(expected))
            assert torch.equal(values.signbit(), expected.values.signbit())
    ties = torch.tensor([2.0, -0.0, NAN, 0.0, 1.0] * 40)  # ATen's unstable sort reorders ties past 16 elements
    for descending in (False, True):
        values, indices = sort_stable_decomposition(ties, stable=True, descending=descending)
        assert torch.equal(indices, torch.sort(ties, stable=True, descending=descending).indices)
        assert torch.equal(values.signbit(), ties[indices].signbit())
    flags = torch.tensor([True, False, True, False])
    _assert_same(sort_stable_decomposition(flags, stable=True), tuple(torch.sort(flags, stable=True)))
    _assert_same(sort_stable_decomposition(torch.tensor(3.0), stable=True), tuple(torch.sort(torch.tensor(3.0),
                                                                                              stable=True)))
    with pytest.raises(IndexError, match="out of range"):
        sort_stable_decomposition(x, stable=True, dim=2)

    class Sort(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, stable=True, dim=0)

    prepared = backend_config("mps").prepare_for_edge(torch.export.export(Sort(), (x,)))
    targets = {n.target for n in prepared.graph.nodes}
    assert torch.ops.aten.argsort.stable in targets and SORT_STABLE not in targets


def _i0_tolerance(dtype):
    # float32/float64: ATen's own error (exp and the recurrence may round an ulp apart); half types: computed
    # in float32 and rounded once, as ATen does, so at most one rounding apart.
    return {} if dtype in (torch.float32, torch.float64) else {"rtol": float(torch.finfo(dtype).eps), "atol": 0.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_i0_is_atens_cephes_approximation_across_both_branches(dtype):
    x = torch.cat([torch.linspace(-100, 100, 4001, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, 8.0, -8.0, 88.7, 89.0, 91.0, 709.0, 710.0, NAN, INF, -INF],
                                dtype=torch.float64)]).to(dtype)
    actual = i0_decomposition(x)
    expected = torch.i0(x)
    _assert_same(actual, expected, _i0_tolerance(dtype))
    assert torch.equal(actual.isinf(), expected.isinf()) and torch.equal(actual.isnan(), expected.isnan())
    assert i0_decomposition(torch.tensor([INF])).isnan().all()  # exp(inf) * c / sqrt(inf), as ATen's CPU i0
    _assert_same(i0_decomposition(torch.tensor([1, -2, 3])), torch.i0(torch.tensor([1, -2, 3])), {})  # float32
    with pytest.raises(DecompositionDeclined, match="complex"):
        i0_decomposition(torch.ones(2, dtype=torch.complex64))


def test_i0_inlined_into_one_expression_stays_linear_in_size():
    """Inductor inlines a value into each op that reads it, re-expanding everything behind it, and where
    nothing reads a buffer (a Kaiser window from arange, i0 of a constant) nothing stops that: a recurrence
    (Clenshaw's, ATen's) re-expands exponentially, and the Kaiser window's CUDA lowering did not finish in
    280 s. Summed term by term, the fully inlined expression is a small multiple of the graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    traced = make_fx(i0_decomposition)(torch.randn(5))
    inlined: dict = {}
    for node in traced.graph.nodes:  # the size of each value's expression with every input inlined
        inlined[node] = 1 + sum(inlined[i] for i in node.all_input_nodes)
    output = traced.graph.output_node()
    assert inlined[output] < 8 * len(traced.graph.nodes), (inlined[output], len(traced.graph.nodes))


def test_i0_is_decomposed_on_cuda_only_and_left_to_metals_code_generator():
    assert I0 in backend_config("cuda").pre_edge_decomposition_table
    metal = backend_config("mps")
    assert I0 not in metal.pre_edge_decomposition_table and I0 in metal.edge_exceptions


# -- end to end ---------------------------------------------------------------------------------------------

class Deduplicate(torch.nn.Module):
    """The unique ops a model uses, each output used."""

    def forward(self, x, rows):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        runs = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
        unique_rows = torch.unique(rows, dim=0, return_inverse=True, return_counts=True)
        column_runs = torch.unique_consecutive(rows, dim=1, return_counts=True)
        return (values * 2, inverse, counts, *runs, *unique_rows, *column_runs, torch.unique(x > 1))


class StableSort(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, stable=True, descending=True)
        return values + 1, indices


DEDUPLICATE_INPUTS = (torch.tensor([3.0, 3.0, 1.0, NAN, 2.0, 2.0, 2.0, -0.0, 0.0]),
                      torch.tensor([[1, 2, 2], [0, 5, 5], [1, 2, 2], [1, 1, 1]]))


@pytest.mark.parametrize("module, inputs, dynamic_shapes, op", [
    # x's length dynamic, with no bound: the data-dependent sizes on top of it need none (no scan).
    (Deduplicate(), DEDUPLICATE_INPUTS, ({0: torch.export.Dim("n")}, None), "aten::_unique2"),
    (StableSort(), (torch.randn(4, 9),), None, "aten::sort.stable")])
def test_stock_stops_at_to_edge_and_shimkit_lowers_clean_for_metal_with_eagers_numbers(module, inputs,
                                                                                         dynamic_shapes, op):
    fixed = assert_stops_stock_and_lowers_clean_for_metal(module, inputs, op, dynamic_shapes)
    if dynamic_shapes is not None:  # checked at other lengths too
        assert len({tuple(sorted(check.sizes.items())) for check in fixed.numerics.checks}) > 1


class _Edge(Exception):
    """Carries the edge program out of ``to_edge_transform_and_lower``: what its partitioner is handed."""

    def __init__(self, program):
        super().__init__("edge program reached the partitioner")
        self.program = program


def _edge_program_for_cuda(module, inputs, config):
    """``config.prepare_for_edge`` of the program, and the edge program ExecuTorch's CUDA lowering hands its
    partitioner: stock ``to_edge_transform_and_lower`` with the AOTI partitioner's rules (every op kept
    whole) and the edge verifier, stopped there (lowering needs a GPU)."""
    from executorch.backends.aoti.aoti_partitioner import AotiPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class Capture(AotiPartitioner):
        def partition(self, exported_program):
            raise _Edge(exported_program)

    prepared = config.prepare_for_edge(torch.export.export(module, inputs, strict=False))
    with pytest.raises(_Edge) as reached:
        to_edge_transform_and_lower(prepared, partitioner=[Capture("CudaBackend", [])],
                                    compile_config=config.edge_compile_config())
    return prepared, reached.value.program


class KaiserFrames(torch.nn.Module):
    def forward(self, frames):
        return frames * torch.kaiser_window(frames.shape[-1], periodic=False, beta=8.0)


class Counts(torch.nn.Module):
    def forward(self, x):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values * 2, inverse, counts


@pytest.mark.parametrize("module, inputs, plugin, op", [
    (KaiserFrames(), (torch.randn(3, 16),), "bessel_i0", "aten.i0.default"),
    (StableSort(), (torch.randn(4, 9),), "sort_stable", "aten.sort.stable"),
    (Counts(), DEDUPLICATE_INPUTS[:1], "unique", "aten._unique2.default")])
def test_cuda_stops_at_to_edge_without_the_plugin_and_gets_past_it_with_eagers_numbers(module, inputs, plugin, op):
    """Core ATen is device-blind: without the plugin the CUDA lowering stops at ``to_edge`` (for i0 after the
    window plugin's decomposition: the stop is the edge verifier, not a missing kernel; Inductor's Triton code
    would have compiled it). With it the edge program holds only core ops and what the partitioner keeps whole
    (argsort.stable, which Inductor sends to the runtime's aoti_torch_cuda_sort_stable), and computes eager's
    numbers."""
    from torch._export.verifier import SpecViolationError

    without = new_registry({"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1", "SHIMKIT_BLOCK_PLUGINS": plugin})
    with pytest.raises(SpecViolationError, match=op.replace(".", r"\.")):
        _edge_program_for_cuda(module, inputs, without.backend_config("cuda"))
    prepared, edge = _edge_program_for_cuda(module, inputs, backend_config("cuda"))
    targets = {str(getattr(n.target, "_op", n.target)) for n in edge.graph.nodes if n.op == "call_function"}
    assert not {"aten.i0.default", "aten.sort.stable", "aten._unique2.default"} & targets, targets
    assert ("aten.argsort.stable" in targets) == (plugin != "bessel_i0"), targets
    actual, expected = prepared.module()(*inputs), module(*inputs)
    _assert_same(actual, expected, {"rtol": 2e-6, "atol": 0.0} if plugin == "bessel_i0" else None)
