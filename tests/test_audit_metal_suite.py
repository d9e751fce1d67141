"""``--suite metal``: what Metal's users ship, exported as upstream exports it, from tiny random-weight configs."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from registry_helpers import CLEAN_ENV  # noqa: E402
from shimkit.audit import run_audit, to_json  # noqa: E402
from shimkit.audit.loader import load_model  # noqa: E402
from shimkit.audit.suites import SuiteError, suite_models  # noqa: E402
from shimkit.backend import new_registry  # noqa: E402


def test_the_suite_offers_each_model_in_upstreams_dtypes():
    models = suite_models("metal")
    assert "metal/llama-decode-bf16" in models and "metal/llama-decode-int4" in models
    assert "metal/whisper-encoder-f32" in models and "metal/whisper-encoder-int4" not in models
    assert suite_models("metal:*-int4") == ["metal/llama-prefill-int4", "metal/llama-decode-int4",
                                             "metal/gemma3-decode-int4", "metal/qwen35-moe-decode-int4",
                                             "metal/qwen35-moe-prefill-int4", "metal/parakeet-tdt-int4"]
    assert "metal/qwen35-moe-decode-f32" in models and "metal/qwen35-moe-decode-bf16" not in models
    with pytest.raises(SuiteError, match="no metal family matches"):
        suite_models("metal:mixtral*")


@pytest.mark.parametrize("name", ["llama-prefill-bf16", "gemma3-decode-bf16", "whisper-encoder-f32",
                                  "parakeet-encoder-bf16", "llama-decode-int4", "qwen35-moe-decode-f32"])
def test_each_model_builds_and_runs_as_its_export_will(name):
    loaded = load_model(f"metal/{name}")
    with torch.no_grad():
        output = loaded.model(*loaded.example_inputs)
    assert output.isfinite().all()
    if name.endswith("int4") or "moe" in name:
        exported = torch.export.export(loaded.model, loaded.example_inputs, strict=False)
        assert any("_linear_fp_act_4bit_weight" in str(node.target) for node in exported.graph.nodes)
    if "moe" in name:  # upstream's Metal forms of its experts and of the delta rule
        targets = {str(node.target) for node in exported.graph.nodes}
        assert {"metal.gather_qmv.default", "metal.gated_delta_rule.default"} <= targets, targets


def test_upstreams_bf16_moe_lowers_and_says_why_eager_cannot_run_it():
    # Upstream's quantize_experts_metal keeps float32 scales for bf16 experts: its Python reference of
    # gather_qmv cannot run them eagerly (its Metal kernel reads them as bf16; the program casts them first,
    # tests/test_passes_operand_dtypes.py). The audit names upstream's line.
    result = run_audit(["metal/qwen35-moe-decode-int4"], registry=new_registry(env=CLEAN_ENV), check_numerics=True)
    model = to_json(result)["models"][0]
    assert model["status"] == "unchecked", model
    assert "gather_qmv.py" in model["numerics"]["unavailable"], model["numerics"]
    kernels = {k["name"]: k["status"] for k in model["kernels"]}
    assert kernels["metal::gather_qmv"] == kernels["metal::gated_delta_rule"] == "supported", kernels


def test_the_static_cache_decode_step_lowers_and_computes_right():
    # It stopped at to_edge ("expected compiled_fn to be GraphModule"), stock and with shimkit, until the
    # cache constants aliasing its buffers were merged (passes/aliased_constants.py).
    result = run_audit(["metal/llama-decode-bf16"], registry=new_registry(env=CLEAN_ENV), check_numerics=True)
    model = to_json(result)["models"][0]
    assert model["status"] == "clean", model["failure"] or model["numerics"]
    # Judged against a float64 copy: its cache layers follow the module's buffers into float64.
    assert model["numerics"]["reference"] == "float64" and model["numerics"]["checks"][0]["ok"]
    assert 0 < model["numerics"]["checks"][0]["float64_errors"][0] < 0.1


def test_a_moved_decoder_step_writes_its_moved_cache():
    loaded = load_model("metal/llama-decode-f32")
    moved = loaded.model.to(torch.float64)
    with torch.no_grad():
        output = moved(*loaded.example_inputs)
    assert output.dtype == torch.float64
    caches = [b for n, b in moved.named_buffers() if "key_cache" in n]
    assert caches and all(c.dtype == torch.float64 for c in caches) and any(c.abs().sum() > 0 for c in caches)


def test_parakeet_tdt_is_a_program_of_upstreams_three_methods_each_computing_right():
    """upstream's export_parakeet_tdt.py: encoder, decoder_step (the LSTM state in and out) and joint (argmaxes)."""
    from shimkit.audit.loader import load_methods

    methods = load_methods("metal/parakeet-tdt-bf16")
    assert [m.method for m in methods] == ["encoder", "decoder_step", "joint"]
    token, h, c = methods[1].example_inputs
    assert h.shape == c.shape == (2, 1, 32) and h.dtype == torch.bfloat16
    result = to_json(run_audit(["metal/parakeet-tdt-bf16"], registry=new_registry(env=CLEAN_ENV),
                               check_numerics=True))
    rows = [(m["name"], m["method"], m["status"]) for m in result["models"]]
    assert rows == [(f"metal/parakeet-tdt-bf16#{method}", method, "clean")
                    for method in ("encoder", "decoder_step", "joint")], result["models"]
