"""``--suite optimum`` (issue 68, part 2): optimum-executorch's own task loaders and exportable modules make the
methods ``optimum-cli export executorch --recipe metal`` exports, and the audit lowers them with the recipe's
settings. These run in the second stack (``./dev optimum test``: transformers 5.0.0rc1); elsewhere they skip."""

from __future__ import annotations

import argparse
import io
import json

import pytest

pytest.importorskip("optimum.exporters.executorch", reason="the optimum stack: ./dev optimum test")

from shimkit.audit.cli import configure_parser, run  # noqa: E402
from shimkit.audit.loader import load_methods  # noqa: E402
from shimkit.audit.optimum_suite import RECIPE_COMPILE_OPTIONS  # noqa: E402


def audit(*argv: str) -> tuple[int, dict]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--json", *argv]), stdout=stdout,
               stderr=stderr)
    return code, json.loads(stdout.getvalue())


@pytest.mark.parametrize("model, methods", [
    ("whisper-bf16", ["encoder", "text_decoder"]),  # no sampler: --device mps in bfloat16 leaves it out
    ("qwen3-int4", ["forward"]),  # the recipe names a program of one method forward
    ("voxtral-bf16", ["text_decoder", "token_embedding", "audio_encoder"]),
])
def test_each_program_is_the_methods_optimum_exports_lowered_as_its_recipe_lowers_them(model, methods):
    from optimum.executorch.passes.remove_padding_idx_embedding_pass import RemovePaddingIdxEmbeddingPass

    loaded = load_methods(f"optimum/{model}")
    assert [m.method for m in loaded] == methods
    for method in loaded:
        assert dict(method.lowering.compile_options) == RECIPE_COMPILE_OPTIONS
        assert [type(p) for p in method.lowering.transform_passes] == [RemovePaddingIdxEmbeddingPass]
        assert method.exported.example_inputs[1] == {}  # keyword inputs made positional, in order
    if model.endswith("int4"):  # fpa4w, as --qlinear fpa4w quantizes every linear layer of the decoder
        targets = {str(n.target) for m in loaded for n in m.exported.graph.nodes if n.op == "call_function"}
        assert "torchao._linear_fp_act_4bit_weight.default" in targets, sorted(targets)


def test_whisper_executes_clean_with_shimkit_every_method_on_its_inputs(tmp_path):
    code, report = audit("--execute", "--cache-dir", str(tmp_path), "optimum/whisper-bf16")
    rows = {m["method"]: m for m in report["models"]}
    assert set(rows) == {"encoder", "text_decoder"}
    for method, row in rows.items():
        assert row["status"] == "clean", (method, row)
        assert row["numerics"]["ran"] == "program" and row["numerics"]["checks"], (method, row["numerics"])
    assert code == 0
