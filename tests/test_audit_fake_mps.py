"""The replacements for device-guarded Tensor methods on fake mps tensors do what the methods do.

They are written with ATen ops only, so on real cpu tensors they can be compared with the Python
methods they stand in for."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.audit.fake_mps import (
    assign_by_ops,
    check_torch_version,
    contiguous_by_ops,
    index_by_ops,
    to_by_ops,
    AuditEnvironmentError,
)


def _index_entries(rank):
    entry = st.one_of(
        st.integers(-1, 1),
        st.builds(slice, st.none() | st.integers(-3, 3), st.none() | st.integers(-3, 3),
                  st.none() | st.integers(1, 2)),
        st.none(),
        st.lists(st.integers(0, 1), min_size=1, max_size=3).map(torch.tensor),
    )
    return st.lists(entry, max_size=rank + 1).flatmap(
        lambda entries: st.sampled_from(range(len(entries) + 1)).map(
            lambda at: tuple(entries[:at]) + (Ellipsis,) + tuple(entries[at:])) | st.just(tuple(entries)))


@st.composite
def indexed(draw):
    shape = draw(st.lists(st.integers(2, 4), min_size=1, max_size=4))
    return torch.arange(math.prod(shape)).reshape(shape), draw(_index_entries(len(shape)))


@settings(max_examples=200)
@given(indexed())
def test_index_by_ops_matches_python_indexing(case):
    tensor, index = case
    try:
        expected = tensor[index]
    except (IndexError, RuntimeError):
        return  # Python rejects it (too many indices, out of range); nothing to compare
    actual = index_by_ops(tensor, index)
    assert actual is not None, index
    assert torch.equal(actual, expected), index


@settings(max_examples=200)
@given(indexed(), st.booleans())
def test_assign_by_ops_matches_python_index_assignment(case, scalar):
    tensor, index = case
    expected = tensor.clone()
    try:
        target_shape = expected[index].shape
        value = -7 if scalar else -torch.arange(math.prod(target_shape)).reshape(target_shape)
        expected[index] = value
    except (IndexError, RuntimeError):
        return
    actual = tensor.clone()
    assert assign_by_ops(actual, index, value), index
    assert torch.equal(actual, expected), index


def test_masks_and_bool_scalars_are_left_to_python():
    tensor = torch.arange(6).reshape(2, 3)
    assert index_by_ops(tensor, torch.tensor([True, False])) is None
    assert index_by_ops(tensor, (True,)) is None
    assert index_by_ops(tensor, (Ellipsis, 0, Ellipsis)) is None
    assert not assign_by_ops(tensor, torch.tensor([True, False]), 0)


def test_contiguous_by_ops_returns_self_or_a_clone_in_the_layout():
    tensor = torch.randn(2, 3, 4, 5)
    assert contiguous_by_ops(tensor, torch.contiguous_format) is tensor
    transposed = tensor.transpose(1, 2)
    result = contiguous_by_ops(transposed, torch.contiguous_format)
    assert result.is_contiguous() and torch.equal(result, transposed.contiguous())
    channels_last = contiguous_by_ops(tensor, torch.channels_last)
    assert channels_last.stride() == tensor.contiguous(memory_format=torch.channels_last).stride()


def test_to_by_ops_aliases_exactly_when_tensor_to_does():
    tensor = torch.randn(2, 3)
    for args, kwargs in [((torch.float32,), {}), (("cpu",), {}), ((), {"dtype": torch.float32}),
                         ((tensor,), {}), ((torch.float16,), {}), (("cpu", torch.float64), {}),
                         ((torch.float32,), {"copy": True}), ((), {"memory_format": torch.contiguous_format})]:
        expected = tensor.to(*args, **kwargs)
        actual = to_by_ops(tensor, *args, **kwargs)
        assert (actual is tensor) == (expected is tensor), (args, kwargs)
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_torch_releases_outside_the_tested_ones_are_refused():
    assert check_torch_version("2.13.0+cpu") == "2.13"
    assert check_torch_version("2.14.1") == "2.14"
    try:
        check_torch_version("2.12.1")
    except AuditEnvironmentError as error:
        assert "torch 2.12.1 is not supported" in str(error)
        assert "2.13.x or 2.14.x" in str(error) and "SHIMKIT_SKIP_VERSION_CHECK=1" in str(error)
    else:
        raise AssertionError("torch 2.12.1 was accepted")


def test_the_audit_follows_the_one_version_policy_skip_warns(monkeypatch):
    import pytest

    monkeypatch.setenv("SHIMKIT_SKIP_VERSION_CHECK", "1")
    with pytest.warns(UserWarning, match="torch 2.12.1 is not supported.*continuing"):
        assert check_torch_version("2.12.1") == "2.12"


MODELS_NEEDING_GUARDED_METHODS = '''
import torch
import torch.nn.functional as F

class Sort(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, dim=-1, descending=True)
        return values * 2, indices

class GridSample(torch.nn.Module):
    def forward(self, x, grid):
        return F.grid_sample(x, grid, align_corners=False)

class Unfold(torch.nn.Module):
    def forward(self, x):
        return F.unfold(x, kernel_size=3, padding=1) * 2

def sort():
    return Sort(), (torch.randn(2, 16),)

def grid_sample():
    return GridSample(), (torch.randn(1, 3, 8, 8), torch.rand(1, 4, 4, 2) * 2 - 1)

def unfold():
    return Unfold(), (torch.randn(1, 3, 8, 8),)

class MaskedIndex(torch.nn.Module):
    def forward(self, x, mask, rows, cols):
        return torch.ops.aten._unsafe_masked_index(x, mask, [rows, cols], -1.0)

def masked_index():
    rows = torch.tensor([[0, 3], [2, 1]])
    return MaskedIndex(), (torch.randn(4, 5), rows > 1, rows, torch.tensor([[4, 0], [1, 2]]))

class Median(torch.nn.Module):
    def forward(self, x):
        return torch.quantile(x, 0.25, dim=1)

def quantile():
    return Median(), (torch.randn(3, 7),)
'''


def test_ops_that_ran_real_work_on_the_fake_device_now_audit(tmp_path):
    """grid_sample's and im2col's (unfold's) decompositions index fake mps tensors; sort was the third
    op a first attempt could not audit. _unsafe_masked_index's decomposition inverts a fake mps mask
    with ``~``; quantile's graph multiplies by 0, which Inductor's constant folder evaluates for real."""
    from shimkit.audit import run_audit

    path = tmp_path / "guarded.py"
    path.write_text(MODELS_NEEDING_GUARDED_METHODS)
    names = ("sort", "grid_sample", "unfold", "masked_index", "quantile")
    run = run_audit([f"{path}:{name}" for name in names], plugins=False)
    results = {name: model for name, model in zip(names, run.models)}
    assert {name: m.failure for name, m in results.items()} == dict.fromkeys(names)
    # sort has no Metal kernel upstream: a real gap, reported as one.
    assert [k.name for k in results["sort"].missing] == ["at::_ops::sort_stable::call"]
    assert results["grid_sample"].status == results["unfold"].status == results["masked_index"].status == "clean"
    # quantile sorts too: with the audit finishing, the same stock gap shows instead of a limitation.
    assert [k.name for k in results["quantile"].missing] == ["at::_ops::sort_stable::call"]


def test_guarded_methods_work_on_fake_mps_tensors_inside_the_scope_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from shimkit.audit import fake_mps_lowering

    mode = FakeTensorMode()
    with mode:
        tensor = torch.ops.aten._to_copy.default(mode.from_tensor(torch.randn(4, 6)), device=torch.device("mps"))
    with fake_mps_lowering(), mode:
        assert tensor.t().contiguous().stride() == (4, 1)
        assert tensor.to("mps") is tensor
        assert tensor.to(torch.float16).dtype == torch.float16
        assert tensor[..., 0].shape == (4,)
        assert tensor[torch.tensor([0, 2], device="mps")].shape == (2, 6)
        target = tensor.clone()
        target[0] = 1.0
        target.copy_(tensor)
        mask = tensor > 0
        assert (~mask).dtype == torch.bool and (~mask).shape == (4, 6)
        try:
            ~tensor
        except TypeError as error:  # as eager: ``~`` is for integers and bool only
            assert "integer" in str(error)
        else:
            raise AssertionError("~ of a float tensor did not raise")
    with mode:
        try:
            tensor.t().contiguous()
        except RuntimeError as error:
            assert "not linked with support for mps" in str(error)
        else:
            raise AssertionError("the replacement outlived the scope")


def test_an_audit_after_torch_compile_in_the_same_process_still_lowers_for_mps():
    """torch.compile on a machine without a GPU caches "cuda" as the GPU type (functools.cache);
    the audit must not inherit it (the mps wrapper then claimed a cuda model). Fresh interpreter:
    the cache is process state."""
    import subprocess
    import sys

    probe = """
import torch
from shimkit.audit import run_audit
from shimkit.backend import new_registry
with torch.no_grad():
    torch.compile(torch.nn.Linear(8, 5).eval())(torch.randn(6, 8))
audit = run_audit(["seed_split_linear"], registry=new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})).models[0]
print("STATUS", audit.status, audit.failure and audit.failure.message)
from torch._inductor.utils import get_gpu_type
print("AFTER", get_gpu_type())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("STATUS", "AFTER")))
    assert lines.get("STATUS") == "clean None", done.stdout + done.stderr[-2000:]
    assert lines["AFTER"] == "cuda"  # the process's own answer again once the audit is over


def test_a_metal_audit_on_a_machine_with_a_cuda_gpu_sees_no_cuda(monkeypatch):
    """A Mac has no CUDA. On a Linux box with a GPU, Inductor found two GPU types (cuda and the fake mps) and
    asserted in ``get_gpu_type`` (found on the H100); dynamo saved CUDA's RNG state around every trace,
    which fails in a forked worker. Here the GPU is simulated on a CPU build of torch."""
    from shimkit.audit import run_audit
    from shimkit.backend import new_registry

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *args, **kwargs: torch.zeros(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *args, **kwargs: None)
    audit = run_audit(["seed_split_linear"],
                      registry=new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})).models[0]
    assert (audit.status, audit.failure) == ("clean", None)
    assert torch.cuda.is_available()  # the machine's own answer again once the audit is over
