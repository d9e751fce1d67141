"""Model suites built from installed libraries (``shimkit audit --suite transformers``): random weights
from configs, no downloads, stock and with shimkit."""

from __future__ import annotations

import argparse
import io

import pytest

from shimkit.audit import run_audit, to_json
from shimkit.audit.cli import configure_parser, run
from shimkit.audit.suites import TRANSFORMERS_FAMILIES, SuiteError, build, suite_models

def test_suite_arguments_select_families():
    assert suite_models("transformers:*bert") == ["transformers/bert", "transformers/distilbert",
                                                  "transformers/albert"]
    assert len(suite_models("transformers")) == len(TRANSFORMERS_FAMILIES)
    with pytest.raises(SuiteError, match="unknown suite 'timm'"):
        suite_models("timm")
    with pytest.raises(SuiteError, match="no transformers family matches 'nope'"):
        suite_models("transformers:nope")


def test_the_optimum_suite_outside_its_stack_says_how_to_install_it():
    import importlib.util

    if importlib.util.find_spec("optimum") is not None:
        pytest.skip("optimum is installed here: tests/test_audit_optimum.py covers the suite")
    with pytest.raises(SuiteError, match=r"optimum\.exporters\.executorch: pip install shimkit\[optimum\].*\./dev optimum"):
        suite_models("optimum")
    with pytest.raises(SuiteError, match=r"optimum/whisper-bf16: needs optimum\.exporters\.executorch"):
        build("optimum/whisper-bf16")


def test_models_are_built_small_and_seeded_without_touching_the_callers_rng():
    import torch

    before = torch.random.get_rng_state()
    first, inputs = build("transformers/llama")
    second, _ = build("transformers/llama")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert sum(p.numel() for p in first.parameters()) < 100_000
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)
    assert first(*inputs).shape == (1, 8, 32)


# swin: clean stock, and failed with shimkit until inline_scalar_constants (Inductor's fuse_attention pattern 5
# bound ExecuTorch's 0-d divisor constant as its scale once view_copy became view).
@pytest.mark.parametrize("family, stock", [("bert", "clean"), ("llama", "missing"), ("whisper", "missing"),
                                           ("swin", "clean")])
def test_suite_models_audit_clean_with_shimkit_and_never_worse_than_stock(family, stock):
    spec = f"transformers/{family}"
    (stock_model,) = to_json(run_audit([spec], plugins=False))["models"]
    (shimkit_model,) = to_json(run_audit([spec], plugins=True))["models"]
    assert stock_model["status"] == stock
    assert shimkit_model["status"] == "clean", shimkit_model["failure"]


def test_the_report_table_compares_shimkit_with_stock(tmp_path):
    stdout, stderr = io.StringIO(), io.StringIO()
    args = configure_parser(argparse.ArgumentParser()).parse_args(
        ["--quiet", "-j", "1", "--suite", "transformers:gpt2", "--report", str(tmp_path / "r.md")])
    assert run(args, stdout=stdout, stderr=stderr) == 0, stderr.getvalue()
    report = (tmp_path / "r.md").read_text()
    assert "| `transformers/gpt2` | clean |  | missing |" in report
    assert "1 of 1 clean with shimkit; 0 stock." in report
