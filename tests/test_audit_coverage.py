"""The OpInfo coverage sweep (shimkit.audit.coverage): its classification on ops whose outcome is known, its
report, and the command line on a small subset (CI runs this subset; the full sweep is one command)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shimkit.audit.coverage import OpResult, audit_op, goal, main, op_names, to_markdown, totals, updated_sweep


@pytest.mark.parametrize("op, stock, shimkit", [
    ("abs", "clean", "clean"),
    ("addmv", "pre-backend", "clean"),       # not core ATen: to_edge refuses it; shimkit's pre-edge decomposition
    ("argsort", "missing", "clean"),          # at::_ops::sort_stable::call: shimkit's MSL sort
    ("_upsample_bilinear2d_aa", "missing", "clean"),  # proxy executor: shimkit's decomposition
    ("cumsum", "missing", "clean"),
])
def test_ops_are_classified_stock_and_with_shimkit(op, stock, shimkit):
    result = audit_op(op, "float32")
    assert (result.stock, result.shimkit) == (stock, shimkit), result
    if stock == "missing":
        assert result.stock_detail  # names the missing kernel


def test_a_dtype_the_op_does_not_support_is_no_sample():
    assert audit_op("bitwise_and", "float32").stock == "no-sample"


def test_the_report_counts_fixes_regressions_and_the_goal():
    results = [OpResult("a", "float32", "clean", "clean"), OpResult("b", "float32", "missing", "clean", "k"),
               OpResult("c", "float32", "pre-backend", "clean", "x"), OpResult("d", "float32", "clean", "error", "",
                                                                               "inductor: boom"),
               OpResult("e", "float32", "not-exportable", "not-exportable", "y", "y")]
    assert totals(results)["shimkit"] == {"clean": 3, "error": 1, "not-exportable": 1}
    # A stop in to_edge (c) is a failure the goal counts, not a reason to leave the op out.
    assert goal(results) == {"eligible": 4, "clean_with_shimkit": 3, "share": 0.75}
    report = to_markdown(results, 12.0, 2)
    assert "- `b` (float32): stock missing (k)" in report and "- `c` (float32)" in report
    assert "- `d` (float32): error (inductor: boom)" in report  # worse with shimkit, listed
    assert "| `e` | float32 | not-exportable | not-exportable | y |" in report


def test_op_patterns_select_opinfo_names():
    assert op_names(["addmv"]) == ["addmv"]
    assert "nn.functional.interpolate.bilinear" in op_names(["nn.functional.interpolate.*"])


def test_the_command_sweeps_a_subset_in_workers(tmp_path):
    done = subprocess.run([sys.executable, "-m", "shimkit.audit.coverage", "-j", "2", "--ops", "abs", "addmv",
                           "--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads((tmp_path / "c.json").read_text())
    assert {(r["op"], r["stock"], r["shimkit"]) for r in document["results"]} == {
        ("abs", "clean", "clean"), ("addmv", "pre-backend", "clean")}
    assert "| `addmv` | float32 | pre-backend | clean |" in (tmp_path / "c.md").read_text()


def test_an_update_replaces_the_ops_audited_again_and_keeps_the_rest():
    stored = {"seconds": 205.0, "jobs": 2, "results": [
        vars(OpResult("unique", "float32", "pre-backend", "pre-backend", "x", "x")),
        vars(OpResult("abs", "float32", "clean", "clean")),
        vars(OpResult("unique", "float16", "pre-backend", "pre-backend", "x", "x")),
        vars(OpResult("double", "float32", "error", "error", "", "KeyError: torch.float64"))],
        "float64_opt_in": [vars(OpResult("double", "float32", "error", "clean")),
                           vars(OpResult("unique", "float32", "error", "wrong"))]}
    fresh = [OpResult("unique", "float32", "pre-backend", "clean", "x"), OpResult("angle", "float32", "pre-backend",
                                                                                  "clean", "y")]
    results, float64 = updated_sweep(stored, fresh, [])
    assert [(r.op, r.dtype, r.shimkit) for r in results] == [
        ("unique", "float32", "clean"), ("abs", "float32", "clean"), ("unique", "float16", "pre-backend"),
        ("double", "float32", "error"), ("angle", "float32", "clean")]
    assert [(r.op, r.shimkit) for r in float64] == [("double", "clean")]   # unique's stale opt-in row is gone
    report = to_markdown(results, 205.0, 2, float64, updated=["angle", "unique"])
    assert "Updated since (`--update`): 2 ops audited again, `angle`, `unique`" in report
    assert "702" not in report and "5 (op, dtype) pairs in 205 s with 2 worker(s)" in report


@pytest.mark.parametrize("content", ["{not json", '{"results": []}'])
def test_an_update_of_what_is_not_a_stored_sweep_is_refused_while_parsing(tmp_path, capsys, content):
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(SystemExit) as stop:
        main(["--update", str(tmp_path / "c.json"), "--ops", "abs"])
    assert stop.value.code == 2 and f"{tmp_path / 'c.json'}" in capsys.readouterr().err
