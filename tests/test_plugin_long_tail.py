"""The second round of long-tail plugins (cumprod, cumulative_trapezoid and linalg.vander through their
composites, nn.Bilinear, adaptive_avg_pool3d, masked_scatter, cdist): each OpInfo op that the sweep found
missing audited end to end (stock missing a kernel, clean with shimkit, and the program Inductor receives
matching eager on PyTorch's own samples). Each plugin against ATen on hypothesis inputs is checked with
every built-in plugin in test_testing_dynamic.py."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.audit.coverage import audit_op, one_op_model
from shimkit.audit.loader import LoadedModel
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import backend_config
from shimkit.passes import DecomposeInPlace
from shimkit.plugins.cdist import cdist_forward_decomposition, pdist_forward_decomposition
from shimkit.plugins.shared import upper_triangle_pairs
from shimkit.plugins.cumsum import cumsum_decomposition
from shimkit.registry import DecompositionDeclined, through_aten_composite

OPS = {f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name: op for op in op_db}


# The OpInfo op and the kernel stock lacks for its first sample (the one the sweep audits).
SWEEP_GAPS = [
    ("cumulative_trapezoid", "at::_ops::cumsum::call"),
    ("linalg.vander", "at::_ops::cumprod::call"),
    ("masked_scatter", "at::_ops::masked_scatter::call"),
    ("nn.functional.bilinear", "at::_ops::_trilinear::call"),
    ("cdist", "at::_ops::_cdist_forward::call"),
    ("nn.functional.pdist", "at::_ops::_pdist_forward::call"),
    ("matrix_exp", "aten::linalg_matrix_exp"),
    ("nn.functional.embedding_bag", "at::_ops::_embedding_bag_forward_only::call"),
    ("nn.functional.adaptive_avg_pool3d", "at::_ops::_adaptive_avg_pool3d::call"),
    ("nn.functional.linear_cross_entropy.chunked", "torch_nn::_linear_cross_entropy_batch_chunked"),
    ("nn.functional.linear_cross_entropy.chunked_none", "torch_nn::_linear_cross_entropy_batch_chunked_no_reduction"),
]


def _audit(name, sample, plugins):
    module, inputs = one_op_model(OPS[name], sample)
    exported = torch.export.export(module, inputs, strict=False)
    config = backend_config("mps") if plugins else None
    return audit_loaded(LoadedModel(name, exported=exported), config=config,
                        options=AuditOptions(numerics=plugins))


@pytest.mark.parametrize("name, stock_missing", SWEEP_GAPS)
def test_the_sweeps_gaps_lower_clean_with_the_right_numbers(name, stock_missing):
    sample = next(iter(OPS[name].sample_inputs("cpu", torch.float32, requires_grad=False)))
    stock = _audit(name, sample, plugins=False)
    assert stock.failure is None and stock_missing in {k.name for k in stock.missing}
    fixed = _audit(name, sample, plugins=True)
    assert fixed.failure is None and not fixed.missing, (fixed.failure, fixed.missing)
    assert fixed.numerics is not None and fixed.numerics.ok and fixed.numerics.checks


def test_cumprod_is_decomposed_before_to_edge_where_stock_stops():
    config = backend_config("mps")
    assert torch.ops.aten.cumprod.default in config.pre_edge_decomposition_table

    class Products(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(x, 1)

    x = torch.tensor([[1.0, -2.0, 0.0, float("inf")], [0.5, 0.5, 4.0, float("nan")]])
    prepared = config.prepare_for_edge(torch.export.export(Products(), (x,)))
    assert torch.ops.aten.cumprod.default not in {n.target for n in prepared.graph.nodes}
    torch.testing.assert_close(prepared.module()(x), torch.cumprod(x, 1), equal_nan=True)


def test_a_composite_is_spliced_with_the_ops_other_plugins_decompose():
    class Trapezoid(torch.nn.Module):
        def forward(self, y):
            return torch.cumulative_trapezoid(y, dx=0.5, dim=1)

    y = torch.randn(2, 9, generator=torch.Generator().manual_seed(0))
    program = torch.export.export(Trapezoid(), (y,))
    table = {torch.ops.aten.cumulative_trapezoid.dx: through_aten_composite("aten::cumulative_trapezoid.dx"),
             torch.ops.aten.cumsum.default: cumsum_decomposition}
    DecomposeInPlace(table)(program)
    targets = {n.target for n in program.graph.nodes if n.op == "call_function"}
    assert not targets & {torch.ops.aten.cumulative_trapezoid.dx, torch.ops.aten.cumsum.default}
    torch.testing.assert_close(program.module()(y), torch.cumulative_trapezoid(y, dx=0.5, dim=1))


def test_a_composite_declines_with_the_reason_of_the_op_inside():
    class Trapezoid(torch.nn.Module):
        def forward(self, y):
            return torch.cumulative_trapezoid(y, dim=1)

    program = torch.export.export(Trapezoid(), (torch.ones(2, 5),),
                                  dynamic_shapes=({1: torch.export.Dim.AUTO},))  # no upper bound
    table = {torch.ops.aten.cumulative_trapezoid.dx: through_aten_composite("aten::cumulative_trapezoid.dx"),
             torch.ops.aten.cumsum.default: cumsum_decomposition}
    DecomposeInPlace(table)(program)
    (node,) = [n for n in program.graph.nodes if n.target == torch.ops.aten.cumulative_trapezoid.dx]
    assert "cumsum scans dim 1" in node.meta["shimkit_declined"] and "upper bound" in node.meta["shimkit_declined"]


def test_only_composite_ops_decompose_through_their_composite():
    with pytest.raises(ValueError, match="aten::_cdist_forward.default has no CompositeImplicitAutograd kernel"):
        through_aten_composite("aten::_cdist_forward")


def test_cdist_takes_atens_path_on_both_sides_of_its_switch_and_under_dynamic_rows():
    generator = torch.Generator().manual_seed(1)
    # Nearby points: the matrix form's cancellation is visible, so matching it shows the same path.
    for rows in (3, 25, 26, 40):
        x1 = torch.randn(rows, 3, generator=generator)
        x2 = x1 + 1e-4
        torch.testing.assert_close(cdist_forward_decomposition(x1, x2, 2.0, None),
                                   torch.ops.aten._cdist_forward(x1, x2, 2.0, None), rtol=1e-6, atol=1e-7)

    class Distances(torch.nn.Module):
        def forward(self, a, b):
            return torch.ops.aten._cdist_forward(a, b, 2.0, None)

    rows = torch.export.Dim("rows", max=64)
    example = (torch.randn(4, 3, generator=generator), torch.randn(5, 3, generator=generator))
    program = torch.export.export(Distances(), example, dynamic_shapes=({0: rows}, {0: rows + 1}))
    DecomposeInPlace({torch.ops.aten._cdist_forward.default: cdist_forward_decomposition})(program)
    assert torch.ops.aten._cdist_forward.default not in {n.target for n in program.graph.nodes}
    for count in (4, 24, 25, 30):  # both forms, selected at run time
        a = torch.randn(count, 3, generator=generator)
        b = a[:1].repeat(count + 1, 1) + 1e-3
        torch.testing.assert_close(program.module()(a, b), torch.ops.aten._cdist_forward(a, b, 2.0, None),
                                   rtol=1e-6, atol=1e-7)


def test_bilinear_declines_where_the_program_leaves_aligned_sizes_unrelated():
    # Exported on empty operands, the meta's size checks never ran: the sizes einsum aligns are unrelated
    # symbols, and decomposing would add a guard on them.
    from shimkit.plugins.bilinear import trilinear_decomposition

    class Layer(torch.nn.Module):
        def forward(self, x1, x2, weight):
            return torch.ops.aten._trilinear(x1, weight, x2, [1, 3], [0], [1, 2], [2, 3])

    args = (torch.ones(0, 0), torch.ones(0, 2), torch.ones(0, 0, 2))
    auto = torch.export.Dim.AUTO
    program = torch.export.export(Layer(), args, dynamic_shapes=tuple({d: auto for d in range(t.dim())}
                                                                      for t in args))
    DecomposeInPlace({torch.ops.aten._trilinear.default: trilinear_decomposition})(program)
    (node,) = [n for n in program.graph.nodes if n.target == torch.ops.aten._trilinear.default]
    assert "export them with one torch.export.Dim" in node.meta["shimkit_declined"]


def test_pdist_pairs_are_triu_indices_from_the_pair_index_alone():
    """Row of pair k by one float32 square root and an exact correction: equal to ATen's triu_indices
    at every row count up to 300 and at 3000 (4.5 million pairs, where float32 alone is off by one)."""
    for n in [*range(0, 301), 3000]:
        rows, columns = upper_triangle_pairs(n, torch.device("cpu"))
        assert torch.equal(torch.stack([rows, columns]), torch.triu_indices(n, n, 1)), n


def test_pdist_on_opinfo_samples_and_under_a_dynamic_row_count():
    for sample in OPS["nn.functional.pdist"].sample_inputs("cpu", torch.float32, requires_grad=False):
        torch.testing.assert_close(pdist_forward_decomposition(sample.input, *sample.args),
                                   torch.ops.aten._pdist_forward(sample.input, *sample.args), equal_nan=True)

    # torch.export cannot export pdist at a dynamic row count (its meta's n (n - 1) / 2 breaks the symbolic
    # printer); shimkit's property check traces the decomposition symbolically instead. At 2 rows the one pair
    # would specialise every elementwise step to size 1: declined there, not wrong.
    from torch.fx.experimental.proxy_tensor import make_fx

    assert make_fx(lambda x: pdist_forward_decomposition(x, 2.0), tracing_mode="symbolic")(torch.randn(5, 3)).graph
    with pytest.raises(DecompositionDeclined, match="example of 2 rows"):
        make_fx(lambda x: pdist_forward_decomposition(x, 2.0), tracing_mode="symbolic")(torch.randn(2, 3))


def test_combinations_lower_where_stock_fails_on_unbacked_sizes():
    """Stock, Inductor fails on the unbacked size export gives combinations; decomposed before to_edge, the
    program has a static size and computes eager's rows on every OpInfo sample it can export."""
    result = audit_op("combinations", "float32")
    assert (result.stock, result.shimkit) == ("error", "clean"), result
    assert "PendingUnbackedSymbolNotFound" in result.stock_detail
    config = backend_config("mps")
    checked = 0
    for sample in OPS["combinations"].sample_inputs("cpu", torch.float32, requires_grad=False):
        module, inputs = one_op_model(OPS["combinations"], sample)
        try:
            exported = torch.export.export(module, inputs, strict=False)
        except Exception:
            continue  # torch cannot export r >= 2 (its own unbacked-symbol error)
        prepared = config.prepare_for_edge(exported)
        assert torch.ops.aten.combinations.default not in {n.target for n in prepared.graph.nodes}
        torch.testing.assert_close(prepared.module()(*inputs), module(*inputs))
        checked += 1
    assert checked


@pytest.mark.parametrize("scale", [20.0, 60.0])
def test_matrix_exp_matches_aten_to_float32_rounding_of_its_squarings(scale):
    """Large norms, many squarings: each doubles the rounding error, in ATen as here, so the two agree to
    1e-4 of the result's scale rather than to torch's default float32 tolerance (the plugin's own check, at
    that default, covers norms up to a few squarings)."""
    from shimkit.plugins.matrix_exp import matrix_exp_decomposition

    generator = torch.Generator().manual_seed(int(scale))
    for n in range(1, 7):
        A = torch.randn(3, n, n, generator=generator) * scale / n
        expected = torch.linalg.matrix_exp(A)
        # Normwise: an entry far smaller than the matrix's largest carries that largest one's rounding.
        torch.testing.assert_close(matrix_exp_decomposition(A), expected, rtol=1e-4,
                                   atol=1e-4 * float(expected.abs().max()))


def test_histogramdd_samples_through_the_decomposed_program():
    """Every OpInfo sample with bin counts, exported and decomposed: a list result (the bin edges) is
    re-pointed element by element, and every element lands in ATen's bin. Stock, the audit could not trace
    the op at all (no meta kernel); with shimkit it lowers clean."""
    table = backend_config("mps").decomposition_table
    checked = 0
    for sample in OPS["histogramdd"].sample_inputs("cpu", torch.float32, requires_grad=False):
        if not isinstance(sample.args[0], (tuple, list)) or isinstance(sample.args[0][0], torch.Tensor):
            continue  # bin edges given as tensors: another op (_histogramdd_from_bin_tensors)
        module, inputs = one_op_model(OPS["histogramdd"], sample)
        program = torch.export.export(module, inputs, strict=False)
        assert DecomposeInPlace(table)(program).modified
        assert torch.ops.aten.histogramdd.default not in {n.target for n in program.graph.nodes}
        hist, edges = program.module()(*inputs)
        expected = module(*inputs)
        torch.testing.assert_close(hist, expected.hist, equal_nan=True)  # density of no points: 0 / 0
        torch.testing.assert_close(list(edges), list(expected.bin_edges))
        checked += 1
    assert checked
    result = audit_op("histogramdd", "float32")
    assert (result.stock, result.shimkit) == ("limitation", "clean"), result


def test_embedding_bag_on_opinfo_samples_and_declined_at_dynamic_sizes():
    """Every OpInfo sample (sum, mean and max bags, weights, padding) through the composite, decomposed;
    a dynamic size is declined rather than checked against ATen on invalid offsets."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from shimkit.plugins.embedding_bag import embedding_bag_decomposition

    checked = 0
    for sample in OPS["nn.functional.embedding_bag"].sample_inputs("cpu", torch.float32, requires_grad=False):
        expected = OPS["nn.functional.embedding_bag"].op(sample.input, *sample.args, **sample.kwargs)
        module, inputs = one_op_model(OPS["nn.functional.embedding_bag"], sample)
        program = torch.export.export(module, inputs, strict=False)
        DecomposeInPlace(backend_config("mps").decomposition_table)(program)
        assert not any("embedding_bag" in str(node.target) for node in program.graph.nodes), program.graph
        torch.testing.assert_close(program.module()(*inputs), expected)
        checked += 1
    assert checked
    weight, indices, offsets = torch.randn(5, 3), torch.tensor([0, 4, 2]), torch.tensor([0, 1])
    with pytest.raises(DecompositionDeclined, match="static sizes only"):
        make_fx(lambda w, i, o: embedding_bag_decomposition(w, i, o), tracing_mode="symbolic")(weight, indices,
                                                                                              offsets)
