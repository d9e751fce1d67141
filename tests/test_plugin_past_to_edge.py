"""Ops that stop stock in ``to_edge`` (not core ATen) and that shimkit's pre-edge decompositions lower:
kthvalue, cummax/cummin, logcumsumexp, searchsorted/bucketize, histc and window functions built in ``forward``.
Each is audited end to end (stock stops at ``to_edge``, shimkit clean with eager's numbers), checked against
ATen on every OpInfo sample, and on the ATen semantics its docstring promises. Hypothesis inputs against ATen,
at dynamic sizes too, are checked for every built-in plugin in test_testing_dynamic.py."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from shimkit.audit.coverage import one_op_model
from shimkit.backend import backend_config
from shimkit.passes import DecomposeInPlace
from shimkit.plugins.cummax import cummax_decomposition, cummin_decomposition
from shimkit.plugins.histc import histc_decomposition
from shimkit.plugins.kthvalue import kthvalue_decomposition
from shimkit.plugins.logcumsumexp import logcumsumexp_decomposition
from shimkit.plugins.searchsorted import searchsorted_decomposition
from shimkit.registry import DecompositionDeclined
from passes_helpers import Decomposing, assert_stops_stock_and_lowers_clean_for_metal

OPS = {op.name: op for op in op_db if not op.variant_test_name}
SWEEP_STOPS = ["kthvalue", "cummax", "cummin", "logcumsumexp", "histc", "searchsorted", "bucketize"]
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("name", SWEEP_STOPS)
def test_the_opinfo_sample_stops_stock_and_lowers_clean_with_eagers_numbers(name):
    sample = next(iter(OPS[name].sample_inputs("cpu", torch.float32, requires_grad=False)))
    assert_stops_stock_and_lowers_clean_for_metal(*one_op_model(OPS[name], sample), name)



def _assert_kthvalue_result(actual, expected, sample):
    """Values equal ATen's; each index holds an element equal to its value (ATen's own choice among equal
    values is its quickselect's)."""
    torch.testing.assert_close(actual.values, expected.values, equal_nan=True, rtol=0, atol=0)
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    keepdim = sample.args[2] if len(sample.args) > 2 else sample.kwargs.get("keepdim", False)
    if sample.input.dim() == 0:
        assert actual.indices.item() == 0
        return
    indices = actual.indices if keepdim else actual.indices.unsqueeze(dim)
    picked = sample.input.gather(dim, indices)
    torch.testing.assert_close(picked if keepdim else picked.squeeze(dim), expected.values, equal_nan=True,
                               rtol=0, atol=0)


@pytest.mark.parametrize("name", SWEEP_STOPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_every_opinfo_sample_matches_aten(name, dtype):
    op = OPS[name]
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"ATen has no {name} for {dtype}")
    mode = Decomposing(backend_config("mps").pre_edge_decomposition_table)
    checked = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        expected = op.op(sample.input, *sample.args, **sample.kwargs)
        with mode:
            actual = op.op(sample.input, *sample.args, **sample.kwargs)
        if name == "kthvalue":
            _assert_kthvalue_result(actual, expected, sample)
        else:  # half: both round a float32 result once
            torch.testing.assert_close(actual, expected, equal_nan=True)
        checked += 1
    assert checked and mode.used, "no sample reached the decomposition"


def test_kthvalue_keeps_atens_nan_order_and_returns_an_equal_element_among_ties():
    x = torch.tensor([[3.0, NAN, 1.0, 3.0, 1.0], [NAN, NAN, 0.0, -INF, 2.0]])
    for k in range(1, 6):
        values, indices = kthvalue_decomposition(x, k, 1)
        expected = torch.kthvalue(x, k, 1)
        torch.testing.assert_close(values, expected.values, equal_nan=True)
        torch.testing.assert_close(x.gather(1, indices[:, None])[:, 0], values, equal_nan=True)
    ints = torch.tensor([[4, 4, 2], [7, 1, 1]])
    assert torch.equal(kthvalue_decomposition(ints, 2, 1, keepdim=True)[0], torch.kthvalue(ints, 2, 1, True).values)
    assert kthvalue_decomposition(torch.tensor(2.5), 1)[0].item() == 2.5
    with pytest.raises(RuntimeError, match="k out of range"):
        kthvalue_decomposition(x, 6, 1)


def test_cummax_and_cummin_return_the_last_index_of_ties_and_of_nan():
    x = torch.tensor([1.0, 1.0, 0.0, -0.0, NAN, 5.0, NAN, 2.0])
    for decomposition, reference in ((cummax_decomposition, torch.cummax), (cummin_decomposition, torch.cummin)):
        values, indices = decomposition(x, 0)
        expected = reference(x, 0)
        torch.testing.assert_close(values, expected.values, equal_nan=True)
        assert indices.tolist() == expected.indices.tolist()
    assert cummax_decomposition(x, 0)[1].tolist() == [0, 1, 1, 1, 4, 4, 6, 6]
    flags = torch.tensor([[True, False, True, True]])
    assert torch.equal(cummin_decomposition(flags, 1)[1], torch.cummin(flags, 1).indices)
    half = torch.tensor([0.5, 2.0, 2.0, -1.0], dtype=torch.bfloat16)
    assert torch.equal(cummax_decomposition(half, 0)[0], torch.cummax(half, 0).values)


def test_logcumsumexp_keeps_infinities_and_accumulates_half_types_in_float32():
    x = torch.tensor([-INF, -INF, 0.0, INF, INF, 80.0, -INF, NAN, 1.0])
    torch.testing.assert_close(logcumsumexp_decomposition(x, 0), torch.logcumsumexp(x, 0), equal_nan=True)
    large = torch.tensor([100.0, 100.0, -100.0, 100.0])  # exp overflows float32: each combine is shifted
    torch.testing.assert_close(logcumsumexp_decomposition(large, 0), torch.logcumsumexp(large, 0))
    long_row = torch.linspace(-3, 3, 500, dtype=torch.float16)
    result = logcumsumexp_decomposition(long_row, 0)
    assert result.dtype == torch.float16
    torch.testing.assert_close(result, torch.logcumsumexp(long_row, 0))
    with pytest.raises(DecompositionDeclined, match="torch.int64"):
        logcumsumexp_decomposition(torch.tensor([1, 2]), 0)


def test_searchsorted_takes_atens_path_through_nan_and_unsorted_boundaries():
    values = torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0, 7.0, NAN])
    for boundaries in (torch.tensor([0.0, 1.0, 1.0, 2.0, NAN]), torch.tensor([3.0, 0.0, NAN, 1.0, -2.0, 5.0]),
                       torch.tensor([]), torch.tensor([NAN, NAN])):
        for right in (False, True):
            assert torch.equal(searchsorted_decomposition(boundaries, values, right=right),
                               torch.searchsorted(boundaries, values, right=right)), (boundaries, right)
    rows = torch.tensor([[0.0, 2.0, 1.0], [5.0, 4.0, 3.0]])
    sorter = rows.argsort(-1)
    queries = torch.tensor([[1.0, 2.5], [3.0, 6.0]])
    result = searchsorted_decomposition(rows, queries, side="right", sorter=sorter, out_int32=True)
    assert result.dtype == torch.int32
    assert torch.equal(result, torch.searchsorted(rows, queries, side="right", sorter=sorter, out_int32=True))


def test_histc_bins_like_aten_at_edges_outside_the_range_and_from_the_data():
    x = torch.tensor([0.0, 0.25, 0.5, 1.0, 1.5, -1.0, NAN, INF])
    for bins, low, high in ((4, 0.0, 1.0), (3, -1.0, 1.5), (1, 0.0, 0.5)):
        assert torch.equal(histc_decomposition(x, bins, low, high), torch.histc(x, bins, low, high))
    finite = torch.tensor([[2.0, 3.0], [2.0, 7.25]])
    assert torch.equal(histc_decomposition(finite, 5), torch.histc(finite, 5))  # the range from the data
    one_value = torch.full((3,), 4.0)
    assert torch.equal(histc_decomposition(one_value, 4), torch.histc(one_value, 4))  # [3, 5]
    assert torch.equal(histc_decomposition(torch.ones(0), 3), torch.histc(torch.ones(0), 3))
    many = torch.rand(5000, generator=torch.Generator().manual_seed(0)).half()  # counts past half's 2048
    assert torch.equal(histc_decomposition(many, 2, 0, 1), torch.histc(many.float(), 2, 0, 1).half())
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        histc_decomposition(x, 3, 2.0, 1.0)


WINDOWS = [(torch.hann_window, ()), (torch.hamming_window, ()), (torch.hamming_window, (0.6,)),
           (torch.hamming_window, (0.6, 0.3)), (torch.blackman_window, ()), (torch.bartlett_window, ()),
           (torch.kaiser_window, ()), (torch.kaiser_window, (5.0,))]


@pytest.mark.parametrize("window, parameters", WINDOWS)
def test_window_functions_are_atens_bit_for_bit_kaiser_to_rounding(window, parameters):
    mode = Decomposing(backend_config("cuda").pre_edge_decomposition_table)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for length in (0, 1, 2, 3, 8, 9, 64, 401):
            for periodic in (True, False):
                expected = window(length, periodic, *parameters, dtype=dtype)
                with mode:
                    actual = window(length, periodic, *parameters, dtype=dtype)
                # kaiser: ATen's kernel evaluates i0 its own way; torch.i0 agrees to rounding, not bit for bit
                tolerance = {} if window is torch.kaiser_window else {"rtol": 0, "atol": 0}
                torch.testing.assert_close(actual, expected, **tolerance, msg=f"{window.__name__}({length}, "
                                           f"{periodic}, {parameters}, dtype={dtype})")
    assert mode.used


def test_a_window_built_in_forward_stops_stock_and_lowers_clean_on_metal():
    class Spectrum(torch.nn.Module):
        def forward(self, frames):
            n = frames.shape[-1]
            return (frames * torch.hamming_window(n) + torch.blackman_window(n, periodic=False)
                    + torch.bartlett_window(n) + torch.kaiser_window(n)) * torch.hann_window(n)

    assert_stops_stock_and_lowers_clean_for_metal(Spectrum(), (torch.randn(3, 16),), "window")


def test_every_backend_decomposes_them_before_to_edge():
    """CUDA's to_edge refuses the same ops (core ATen is device-blind): the decompositions apply there too,
    hann_window included, which Metal's stock to_edge happens to expand itself."""
    ops = [torch.ops.aten.kthvalue.default, torch.ops.aten.cummax.default, torch.ops.aten.cummin.default,
           torch.ops.aten.logcumsumexp.default, torch.ops.aten.histc.default, torch.ops.aten.searchsorted.Tensor,
           torch.ops.aten.bucketize.Tensor, torch.ops.aten.hann_window.default, torch.ops.aten.kaiser_window.beta]
    for device in ("mps", "cuda"):
        table = backend_config(device).pre_edge_decomposition_table
        assert all(op in table for op in ops), device

    class Frames(torch.nn.Module):
        def forward(self, x):
            return x * torch.hann_window(x.shape[-1], device=x.device)

    x = torch.randn(2, 8)
    prepared = backend_config("cuda").prepare_for_edge(torch.export.export(Frames(), (x,)))
    assert torch.ops.aten.hann_window.default not in {n.target for n in prepared.graph.nodes}
    torch.testing.assert_close(prepared.module()(x), x * torch.hann_window(8), rtol=0, atol=0)


def test_scans_need_an_upper_bound_on_a_dynamic_dimension():
    class Running(torch.nn.Module):
        def forward(self, x):
            return torch.cummax(x, 1).values + torch.logcumsumexp(x, 1)

    x = torch.randn(2, 6)
    table = {torch.ops.aten.cummax.default: cummax_decomposition,
             torch.ops.aten.logcumsumexp.default: logcumsumexp_decomposition}
    unbounded = torch.export.export(Running(), (x,), dynamic_shapes=({1: torch.export.Dim.AUTO},))
    DecomposeInPlace(table)(unbounded)
    declined = [n.meta["shimkit_declined"] for n in unbounded.graph.nodes if "shimkit_declined" in n.meta]
    assert declined and all("no upper bound" in reason for reason in declined)

    bounded = torch.export.export(Running(), (x,), dynamic_shapes=({1: torch.export.Dim("n", max=40)},))
    DecomposeInPlace(table)(bounded)
    assert not {torch.ops.aten.cummax.default, torch.ops.aten.logcumsumexp.default} & {
        n.target for n in bounded.graph.nodes}
    for length in (2, 17, 40):  # one step count, right at every length up to the bound
        y = torch.randn(2, length)
        torch.testing.assert_close(bounded.module()(y), Running()(y))
