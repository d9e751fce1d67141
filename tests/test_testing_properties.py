"""shimkit.testing properties on shimkit's own passes, and what a failure reports."""

import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from shimkit.passes.view_replacement import ReplaceViewCopyWithView
from shimkit.testing import (INPLACE_OPS, POINTWISE_OPS, VIEW_COPY_OPS, PropertyFailure, assert_idempotent, assert_matches_reference, assert_meta_consistent,
                             assert_preserves_semantics, graphs)
from shimkit.testing.gallery import ViewCopyToViewIgnoringWrites

VIEW_PROGRAMS = VIEW_COPY_OPS + INPLACE_OPS + POINTWISE_OPS


@given(graphs(VIEW_PROGRAMS))
def test_view_replacement_keeps_meaning(program):
    assert_preserves_semantics(ReplaceViewCopyWithView(), program)


@given(graphs(VIEW_PROGRAMS, dialect="edge"))
def test_view_replacement_keeps_meaning_of_edge_dialect_graphs(program):
    assert_preserves_semantics(ReplaceViewCopyWithView(), program)


@given(graphs(VIEW_PROGRAMS))
def test_view_replacement_is_idempotent(program):
    assert_idempotent(ReplaceViewCopyWithView(), program)


@given(graphs(VIEW_PROGRAMS))
def test_view_replacement_keeps_meta_consistent(program):
    assert_meta_consistent(ReplaceViewCopyWithView(), program)


@settings(max_examples=5, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(VIEW_PROGRAMS, form="edge", max_calls=4))
def test_view_replacement_keeps_meaning_of_edge_programs(program):
    assert_preserves_semantics(ReplaceViewCopyWithView(), program)


def _first_failure(strategy, check):
    """The PropertyFailure hypothesis reports (after shrinking) under the ci profile."""
    @settings(settings.get_profile("ci"), database=None)
    @given(strategy)
    def run(program):
        check(program)

    with pytest.raises(PropertyFailure) as failure:
        run()
    return str(failure.value)


def test_a_failure_shrinks_to_a_minimal_program_and_prints_a_script_that_reproduces_it(tmp_path):
    message = _first_failure(graphs(("aten::slice_copy.Tensor", "aten::mul_.Scalar", "aten::neg.default")),
                             lambda p: assert_preserves_semantics(ViewCopyToViewIgnoringWrites(), p))
    summary = next(line for line in message.splitlines() if line.startswith("program: "))
    # Shrinking drops calls and simplifies inputs; it does not always reach the 2-call minimum.
    assert summary.count(";") <= 4, f"not shrunk to at most five calls: {summary}"
    script = message.split("Reproduce with:\n\n", 1)[1]
    assert "from shimkit.testing.gallery import ViewCopyToViewIgnoringWrites" in script
    path = tmp_path / "repro.py"
    path.write_text(script)
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    headline = message.splitlines()[0]
    expected_error = ("AssertionError" if headline.startswith("semantics changed")
                      else headline.split("]: ", 1)[1].split(":")[0])  # "the transformed program raised"
    assert run.returncode != 0 and expected_error in run.stderr, run.stderr[-2000:]


def test_assert_matches_reference_reports_the_arguments():
    with pytest.raises(PropertyFailure, match=r"arguments: \(torch.tensor\(\[1.0, 2.0\]"):
        assert_matches_reference(torch.neg, torch.abs, (torch.tensor([1.0, 2.0]),))
