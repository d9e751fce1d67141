"""``shimkit audit --check-numerics``: the program handed to Inductor, run on the CPU, against eager."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export import Dim, export

from registry_helpers import CLEAN_ENV
from shimkit.audit import numerics, run_audit, to_json
from shimkit.audit.cli import configure_parser, run
from shimkit.audit.numerics import _compare, size_plans
from shimkit.audit.options import AuditOptions
from shimkit.registry import OpPlugin, hookimpl
from shimkit.backend import new_registry

CUMSUM = "aten::cumsum.default"


def fixed_four_step_cumsum(self, dim, *, dtype=None):
    """A scan with the step count of the example length 16 written in: no guard, wrong past 16."""
    values = self.to(dtype or (torch.int64 if not self.is_floating_point() else self.dtype))
    length = values.shape[dim]
    positions = torch.arange(length, device=values.device)
    along = [length if d == dim % values.dim() else 1 for d in range(values.dim())]
    for shift in (1, 2, 4, 8):
        source = positions - shift
        earlier = values.index_select(dim, source.clamp(min=0))
        values = values + torch.where((source >= 0).reshape(along), earlier, torch.zeros((), dtype=values.dtype))
    return values


class BakedCumsum:
    @hookimpl
    def shimkit_op_plugins(self):
        yield OpPlugin(name="baked-cumsum", ops=(CUMSUM,), priority=10,
                       decompositions={CUMSUM: fixed_four_step_cumsum})


def test_the_dynamic_zoo_model_matches_eager_at_its_bounds_and_past_the_example():
    result = run_audit(["position_ids_dynamic"], registry=new_registry(env=CLEAN_ENV), check_numerics=True)
    audit = result.models[0]
    assert audit.status == "clean"
    sizes = [check.sizes["input_ids.shape[1]"] for check in audit.numerics.checks]
    assert sizes == [16, 2, 64, 17]
    assert all(check.ok and check.max_errors == [0.0] for check in audit.numerics.checks)


def test_a_decomposition_that_bakes_the_example_size_is_reported_wrong_with_exit_1(capsys):
    registry = new_registry(env=CLEAN_ENV)
    registry.register(BakedCumsum(), name="baked")
    result = run_audit(["position_ids_dynamic"], registry=registry, check_numerics=True)
    audit = result.models[0]
    assert audit.status == "wrong" and not audit.missing  # it lowers clean: only numerics can tell
    by_size = {check.sizes["input_ids.shape[1]"]: check for check in audit.numerics.checks}
    assert by_size[16].ok and by_size[2].ok
    assert not by_size[17].ok and not by_size[64].ok
    assert by_size[64].max_errors[0] > 1
    document = to_json(result)
    assert document["exit_code"] == 1 and document["summary"]["wrong"] == 1
    assert document["models"][0]["numerics"]["checks"][2]["ok"] is False


def test_the_json_report_carries_numerics_per_model():
    args = configure_parser(__import__("argparse").ArgumentParser()).parse_args(
        ["--json", "--quiet", "--check-numerics", "cumsum"])
    import io
    out, err = io.StringIO(), io.StringIO()
    assert run(args, stdout=out, stderr=err) == 0
    model = json.loads(out.getvalue())["models"][0]
    assert model["numerics"]["ok"] is True
    assert model["numerics"]["checks"][0]["sizes"] == {}  # a static model: the example sizes only
    assert model["numerics"]["checks"][0]["max_errors"][0] < 1e-5


class Scan(torch.nn.Module):
    def forward(self, x, y):
        return torch.cumsum(x, 1), y * 2


@pytest.mark.parametrize("dims, expected", [
    ({1: Dim("seq", min=3, max=40)}, [{"x": 16}, {"x": 3}, {"x": 40}, {"x": 17}]),
    ({1: Dim("seq", min=3)}, [{"x": 16}, {"x": 3}, {"x": 33}, {"x": 17}]),  # unbounded: 2 * 16 + 1
])
def test_size_plans_cover_bounds_and_the_next_size(dims, expected):
    program = export(Scan(), (torch.randn(2, 16), torch.randn(3)), dynamic_shapes=(dims, None))
    plans = [{"x": value for value in plan.values()} for plan in size_plans(program)]
    assert plans == expected


class Doubled(torch.nn.Module):
    """Its input's dynamic size is 2 * s: a derived size, varied through its symbol."""

    def forward(self, x):
        return torch.cumsum(x.reshape(-1, 2), 0)


def doubled_factory():
    return Doubled(), (torch.randn(8),), ({0: 2 * Dim("half", min=2, max=16)},)


def result_of(audit):
    from shimkit.audit.runner import AuditRun

    return AuditRun([audit], True, new_registry(env=CLEAN_ENV), None)


def test_derived_dynamic_sizes_are_varied_through_their_symbol():
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.runner import audit_loaded

    model, inputs, shapes = doubled_factory()
    audit = audit_loaded(LoadedModel("doubled", model=model, example_inputs=inputs, dynamic_shapes=shapes),
                         config=new_registry(env=CLEAN_ENV).backend_config("mps"),
                         options=AuditOptions(numerics=True))
    checks = audit.numerics.checks
    assert [list(c.sizes.values()) for c in checks] == [[4], [2], [16], [5]]
    assert all(c.ok for c in checks) and "x.shape[0] = 2*" in next(iter(checks[0].sizes))


def test_a_program_the_check_cannot_copy_is_reported_unavailable_and_the_audit_goes_on(monkeypatch):
    import shimkit.audit.numerics as numerics

    def refuse(module, real_value):
        raise numerics.NumericsUnavailable("no real value is known for p_fc_weight")

    monkeypatch.setattr(numerics, "cpu_copy", refuse)
    audit = run_audit(["seed_split_linear"], registry=new_registry(env=CLEAN_ENV), check_numerics=True).models[0]
    assert audit.failure is None and not audit.missing
    assert "no real value is known for p_fc_weight" in audit.numerics.unavailable
    assert audit.status == "unchecked"  # unproven numbers are not clean, nor known wrong
    assert to_json(result_of(audit))["exit_code"] == 2


def test_a_stand_in_that_cannot_run_leaves_the_model_unchecked_not_wrong(monkeypatch):
    """On the H100 AOTInductor's own loader crashed on every package: that says nothing of the numbers."""
    import shimkit.audit.numerics as numerics

    def crashing_stand_in(module, real_value):
        def run(*operands):
            raise numerics.NumericsUnavailable("AOTInductor's compile-and-run process died of signal 11")
        return run

    monkeypatch.setattr(numerics, "cpu_copy", crashing_stand_in)
    audit = run_audit(["seed_split_linear"], registry=new_registry(env=CLEAN_ENV), check_numerics=True).models[0]
    assert "died of signal 11" in audit.numerics.unavailable and audit.numerics.checks == []
    assert audit.status == "unchecked"


# -- verdicts judged against float64 (Inductor's accuracy check) ------------------------------------------------

def _one_check(got: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor | None):
    return _compare({}, [got], [eager], references=None if reference is None else [reference])


def test_an_output_no_farther_from_float64_than_eager_passes_though_it_differs_from_eager():
    # As cuDNN's GRU against the lowered matmuls on a GPU: eager itself is 3e-4 from float64.
    reference = torch.linspace(-1, 1, 64, dtype=torch.float64)
    eager, lowered = (reference + 3e-4).float(), (reference - 1e-5).float()
    assert not _one_check(lowered, eager, None).ok  # 3.1e-4 from eager: wrong by the eager-only check
    check = _one_check(lowered, eager, reference)
    assert check.ok, check.error
    assert check.float64_errors[0] == pytest.approx(1e-5, rel=0.1)
    assert check.eager_float64_errors[0] == pytest.approx(3e-4, rel=0.1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_wrong_result_is_caught_in_every_dtype(dtype):
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(256, generator=generator, dtype=torch.float64)
    eager = reference.to(dtype)
    assert _one_check(eager, eager, reference).ok
    for mutant in (reference.sinh(), reference * 1.1, -reference, reference.roll(1)):
        check = _one_check(mutant.to(dtype), eager, reference)
        assert not check.ok and "from float64" in check.error, check


def test_special_values_must_match_eager_where_eager_has_them():
    reference = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, float("nan"), float("inf")])
    assert _one_check(eager.clone(), eager, reference).ok
    for lowered in (torch.tensor([1.0, 2.0, float("inf")]), torch.tensor([1.0, float("nan"), -float("inf")])):
        assert not _one_check(lowered, eager, reference).ok


def test_integer_and_empty_outputs_are_judged_against_eager():
    check = _compare({}, [torch.tensor([1, 2]), torch.zeros(0)], [torch.tensor([1, 3]), torch.zeros(0)],
                     references=[torch.tensor([1, 2]), torch.zeros(0, dtype=torch.float64)])
    assert not check.ok and check.float64_errors == [None, None]


@given(values=st.lists(st.sampled_from([0.0, 1.5, -2.0, 1e-3, 7.0, float("nan"), float("inf"), -float("inf")]),
                       min_size=1, max_size=40),
       noise=st.lists(st.sampled_from([0.0, 1e-4, -3e-3, 0.5, float("nan"), float("inf")]), min_size=40, max_size=40),
       chunk=st.integers(1, 9), dtype=st.sampled_from([torch.float32, torch.bfloat16]))
@settings(max_examples=60, deadline=None)
def test_a_verdict_compared_a_chunk_at_a_time_is_the_whole_tensors_verdict(values, noise, chunk, dtype):
    """An LLM's logits are compared a chunk at a time (bounded temporaries): every figure and the verdict are
    those of the whole tensors, special values included wherever they fall."""
    reference = torch.tensor(values, dtype=torch.float64)
    eager = reference.to(dtype)
    lowered = (reference + torch.tensor(noise[:len(values)], dtype=torch.float64)).to(dtype)
    whole = _one_check(lowered, eager, reference)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numerics, "_CHUNK", chunk)
        chunked = _one_check(lowered, eager, reference)
    assert (chunked.ok, chunked.error, chunked.max_errors, chunked.float64_errors, chunked.eager_float64_errors) == \
        (whole.ok, whole.error, whole.max_errors, whole.float64_errors, whole.eager_float64_errors)


BF16_MODEL = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(16, 32, generator=generator).to(torch.bfloat16))

    def forward(self, x):
        return torch.sinh(0.3 * (x @ self.weight.t()))

def make():
    return Model(), (torch.randn(4, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),)
"""


class SinhAsIdentity:
    """A deliberately wrong decomposition: sinh(x) = x, off by x**3 / 6 and more."""

    @hookimpl
    def shimkit_op_plugins(self):
        yield OpPlugin(name="sinh-as-identity", ops=("aten::sinh.default",), priority=100,
                       decompositions={"aten::sinh.default": lambda x: x * 1})


@pytest.mark.parametrize("numerics", [True, "execute"], ids=["check-numerics", "execute"])
def test_bf16_verdicts_report_real_errors_and_still_catch_a_wrong_decomposition(tmp_path, numerics):
    path = tmp_path / "bf16_model.py"
    path.write_text(BF16_MODEL)
    spec = f"{path}:make"
    result = run_audit([spec], registry=new_registry(env=CLEAN_ENV), check_numerics=numerics)
    audit = result.models[0]
    assert audit.status == "clean", to_json(result)["models"][0]
    assert audit.numerics.reference == "float64"
    [check] = audit.numerics.checks
    assert check.ok and check.eager_float64_errors[0] > 0 and check.float64_errors[0] > 0, check  # real bf16 errors
    registry = new_registry(env=CLEAN_ENV)
    registry.register(SinhAsIdentity(), name="mutant")
    mutated = run_audit([spec], registry=registry, check_numerics=numerics).models[0]
    assert mutated.status == "wrong" and "from float64" in mutated.numerics.checks[0].error, mutated.numerics


def test_only_ops_that_draw_random_numbers_take_the_float64_reference_away():
    import torch.nn.functional as F

    from shimkit.audit.numerics import draws_random_numbers

    def exported(forward):
        module = type("M", (torch.nn.Module,), {"forward": lambda self, x: forward(x)})()
        return torch.export.export(module, (torch.randn(1, 2, 4, 8),))

    assert not draws_random_numbers(exported(lambda x: F.scaled_dot_product_attention(x, x, x)))
    assert not draws_random_numbers(exported(lambda x: F.dropout(x, 0.5, training=False)))
    assert draws_random_numbers(exported(lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)))
    assert draws_random_numbers(exported(lambda x: x + torch.rand_like(x)))
    assert draws_random_numbers(exported(lambda x: torch.bernoulli(x.sigmoid())))


EAGER_FAILS = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            raise ValueError("this model runs only when exported")
        return x * 2


def make():
    return Model(), (torch.randn(4),)
"""


def test_an_eager_model_that_raises_leaves_the_numerics_unchecked_naming_the_line(tmp_path):
    path = tmp_path / "eager_fails.py"
    path.write_text(EAGER_FAILS)
    audit = run_audit([f"{path}:make"], registry=new_registry(env=CLEAN_ENV), check_numerics=True).models[0]
    assert audit.status == "unchecked"
    unavailable = audit.numerics.unavailable
    assert "runs only when exported" in unavailable
    assert f"raised at {path}:8 in forward: raise ValueError" in unavailable, unavailable


class RunningTotal(torch.nn.Module):
    """Each call adds its rows to a buffer and scales its input by the total: a run's answer depends on the runs
    before it, as a prefill's on the KV cache the last prefill left."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(8))

    def forward(self, x):
        self.total.add_(x.sum(0))
        return x * self.total


class FreshEachRun:
    """A program handed to Inductor that loads its weights for every run, as :class:`AotiCompiled` does (a process
    per run, the CUDA check): what a run writes to a buffer is gone by the next."""

    def __init__(self, module):
        self.module = module

    def __call__(self, *operands):
        import copy

        return copy.deepcopy(self.module)(*operands)


def _running_total_audit(numerics):
    from shimkit.audit.loader import LoadedModel
    from shimkit.audit.runner import audit_loaded

    batch = Dim("batch", min=1, max=32)
    return audit_loaded(LoadedModel("running_total", model=RunningTotal(), example_inputs=(torch.randn(4, 8),),
                                    dynamic_shapes=({0: batch},)),
                        config=new_registry(env=CLEAN_ENV).backend_config("mps"), options=AuditOptions(numerics=numerics))


def test_every_run_a_verdict_compares_starts_from_the_same_state(monkeypatch):
    """The GPU check's programs start each run from their weights while eager carried its buffers from one size plan
    into the next: this toy was WRONG from the second plan on (llama-prefill-bf16 on the H200, stock and shimkit)."""
    import shimkit.audit.numerics as numerics

    copy_of = numerics.cpu_copy
    monkeypatch.setattr(numerics, "cpu_copy", lambda module, real_value: FreshEachRun(copy_of(module, real_value)))
    audit = _running_total_audit(True)
    checks = audit.numerics.checks
    assert [list(c.sizes.values()) for c in checks] == [[4], [1], [32], [5]]
    assert audit.status == "clean", [c.error for c in checks]
    assert all(c.max_errors[0] < 1e-5 for c in checks)


def test_an_executed_program_with_a_mutable_buffer_is_loaded_afresh_for_every_run():
    """The Metal program keeps its buffers between runs as ExecuTorch does; each compared run loads it again from
    its weights blob (a second UpdateConstantsFromBlob into the same model reads freed memory)."""
    audit = _running_total_audit("execute")
    assert audit.numerics.ran == "program" and len(audit.numerics.checks) == 4
    assert audit.status == "clean", [c.error for c in audit.numerics.checks]


def test_initial_state_puts_back_buffers_and_rebound_attributes():
    from shimkit.audit.numerics import InitialState

    model = RunningTotal()
    first = model.total
    start = InitialState(model)
    model(torch.ones(2, 8))
    model.total = torch.full((8,), 5.0)  # a forward that rebinds its buffer instead of writing it
    start.restore()
    assert model.total is first and torch.equal(first, torch.zeros(8))


def test_positions_in_the_example_go_on_counting_at_other_sizes():
    """A prefill's ``cache_position = arange(n)`` drawn at random repeated positions, and a cache written twice at one
    position keeps whichever write the device ends with: the verdict compared two arbitrary answers."""
    from shimkit.audit.numerics import inputs_at, size_plans

    class Prefill(torch.nn.Module):
        def forward(self, tokens, position, index):
            return tokens + position + index

    n = Dim("n", min=1, max=15)
    examples = (torch.ones(2, 4), torch.arange(3, 7).expand(2, 4), torch.tensor([[2, 0, 1, 3], [1, 1, 0, 2]]))
    exported = export(Prefill(), examples, dynamic_shapes=({1: n}, {1: n}, {1: n}))
    generator = torch.Generator().manual_seed(0)
    for plan in size_plans(exported)[1:]:
        tokens, position, index = inputs_at(exported, examples, plan, generator)
        length = tokens.shape[1]
        assert torch.equal(position, (3 + torch.arange(length)).expand(2, length))
        assert index.shape == (2, length) and index.min() >= 0 and index.max() <= 3



class SliceWriter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8))
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        self.cache[:, : x.shape[1]] = x
        return self.cache * self.scale


class ReadsOnly(SliceWriter):
    def forward(self, x):
        return self.cache[:, : x.shape[1]] + x * self.scale[: x.shape[1]]


@pytest.mark.parametrize("model, writes", [(RunningTotal(), True), (SliceWriter(), True), (ReadsOnly(), False)])
def test_a_program_that_writes_a_buffer_is_told_from_one_that_reads_them(model, writes):
    """Only a program with state is put back between runs (an executed one loaded again: ExecuTorch's own runtime
    refuses a second load in one process)."""
    from shimkit.audit.numerics import _writes

    exported = export(model, (torch.ones(2, 8),), strict=False)
    assert _writes(exported, set(exported.graph_signature.inputs_to_buffers)) is writes
    assert _writes(exported.run_decompositions(), set(exported.graph_signature.inputs_to_buffers)) is writes
