"""``shimkit.passes.experts``: transformers' sparse MoE blocks in a dense form ``torch.export`` accepts (issue 68,
part 4), checked against the blocks' own ``forward`` (transformers' code, not ours) and through the audit."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from transformers import Qwen3MoeConfig, Qwen3NextConfig  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeForCausalLM, Qwen3MoeSparseMoeBlock  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextSparseMoeBlock  # noqa: E402

from registry_helpers import CLEAN_ENV  # noqa: E402
from shimkit.audit import run_audit, to_json  # noqa: E402
from shimkit.backend import new_registry  # noqa: E402
from shimkit.passes.experts import NotAnExpertsBlock, dense_experts, dense_forward, is_experts_block  # noqa: E402

SIZES = dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_attention_heads=2,
             num_key_value_heads=1, head_dim=16, vocab_size=64)


def _block(kind, experts, top_k, norm):
    torch.manual_seed(0)
    if kind == "qwen3_next":
        config = Qwen3NextConfig(**SIZES, num_experts=experts, num_experts_per_tok=top_k, norm_topk_prob=norm,
                                 shared_expert_intermediate_size=16)
        return Qwen3NextSparseMoeBlock(config).eval()
    config = Qwen3MoeConfig(**SIZES, num_experts=experts, num_experts_per_tok=top_k, norm_topk_prob=norm)
    return Qwen3MoeSparseMoeBlock(config).eval()


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["qwen3_moe", "qwen3_next"]), experts=st.integers(1, 6), data=st.data(),
       norm=st.booleans(), tokens=st.integers(0, 9), batch=st.integers(1, 2),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_the_dense_form_computes_what_the_blocks_own_forward_computes(kind, experts, data, norm, tokens, batch,
                                                                      dtype):
    top_k = data.draw(st.integers(1, experts))
    block = _block(kind, experts, top_k, norm).to(dtype)
    hidden = torch.randn(batch, tokens, SIZES["hidden_size"], generator=torch.Generator().manual_seed(tokens)).to(dtype)
    with torch.no_grad():
        want, want_logits = block(hidden)
        got, got_logits = dense_forward(block, hidden)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=0)
    # The only change is the order of the sum over experts (and each expert's rows computed with all tokens').
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, want, **tolerance)


def test_transformers_qwen3_moe_exports_only_with_dense_experts_and_comes_back_as_written():
    config = Qwen3MoeConfig(**SIZES, num_experts=4, num_experts_per_tok=2, num_hidden_layers=1, use_cache=False)
    model = Qwen3MoeForCausalLM(config).eval()
    tokens = torch.tensor([[1, 2, 3, 4]])
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(model, (tokens,), strict=False)
    with torch.no_grad(), dense_experts(model) as blocks:
        exported = torch.export.export(model, (tokens,), strict=False)
    assert [type(b).__name__ for b in blocks] == ["Qwen3MoeSparseMoeBlock"]
    assert "forward" not in vars(blocks[0])  # its own forward again
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(tokens).logits, model(tokens).logits, rtol=1e-5, atol=1e-6)


def test_a_module_that_is_no_experts_block_is_named():
    assert not is_experts_block(torch.nn.Linear(2, 2))
    with pytest.raises(NotAnExpertsBlock, match="Linear is not a sparse MoE block .*lacks gate, experts"):
        dense_forward(torch.nn.Linear(2, 2), torch.ones(1, 1, 2))
    with dense_experts(torch.nn.Linear(2, 2)) as blocks:
        assert blocks == []


def test_transformers_qwen3_moe_lowers_and_computes_right_with_shimkit_and_stops_stock():
    registry = new_registry(env=CLEAN_ENV)
    shimkit = to_json(run_audit(["metal/qwen3-moe-prefill-bf16"], registry=registry, check_numerics=True))
    model = shimkit["models"][0]
    assert model["status"] == "clean", model["failure"] or model["numerics"]
    assert [c["sizes"]["input_ids.shape[1]"] for c in model["numerics"]["checks"]] == [4, 1, 31, 5]
    stock = to_json(run_audit(["metal/qwen3-moe-prefill-bf16"], registry=registry, plugins=False))["models"][0]
    source = stock["failure"]["source"]
    assert stock["status"] == "stopped" and source["file"].endswith("modeling_qwen3_moe.py"), stock
    assert source["code"] == "for expert_idx in expert_hit:"
