"""Mixture-of-experts blocks that ``torch.export`` accepts: the one rewrite that runs on modules, before there is a
graph to pass over.

transformers' sparse MoE blocks (Qwen3-MoE, Qwen3-Next, and every block written after Mixtral's) route each token
to its top-k experts with a Python loop over the experts some token chose::

    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
        ...
        final_hidden_states.index_add_(0, top_x, current_hidden_states)

How many times the loop runs and how many tokens each expert sees are data: ``torch.export`` stops at the
``nonzero`` (a data-dependent loop bound, reported at ``modeling_qwen3_moe.py:250``), so a user holding the
Hugging Face model has no path to Metal. :func:`dense_experts` swaps each such block's ``forward``, for as long as
it is in effect, for the **dense** form: every expert runs on every token and the router's top-k weights, scattered
into a ``[tokens, experts]`` matrix that is zero off the chosen experts, combine them. Same routing (softmax in
float32, top-k, the optional renormalisation, the cast back), the same expert modules called, so weights keep their
names and a quantizer that replaces the experts' ``nn.Linear`` layers (``--qlinear fpa4w``) applies unchanged; the
only difference from the loop is the order of the sum over experts. It costs ``num_experts / top_k`` times the
experts' arithmetic: the price of a graph with no data-dependent shape (upstream's own Qwen3.5-MoE instead gathers
the chosen experts' 4-bit weights, ``gather_qmv``; that form needs its packed weights, not transformers' modules).

    >>> from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    >>> model = Qwen3MoeForCausalLM(Qwen3MoeConfig(hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
    ...     num_experts=4, num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
    ...     head_dim=16, vocab_size=64)).eval()
    >>> with dense_experts(model) as blocks:
    ...     exported = torch.export.export(model, (torch.tensor([[1, 2, 3]]),), strict=False)
    >>> [type(block).__name__ for block in blocks]
    ['Qwen3MoeSparseMoeBlock']
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn


class NotAnExpertsBlock(TypeError):
    """A module handed to :func:`dense_forward` that lacks what the dense form reads (named in the message)."""


# What a transformers sparse MoE block holds, as the dense form reads it.
_BLOCK_ATTRIBUTES = ("gate", "experts", "top_k", "num_experts", "norm_topk_prob")


def is_experts_block(module: nn.Module) -> bool:
    """Whether ``module`` is a transformers sparse MoE block of the Mixtral lineage: a ``gate`` module routing to
    ``experts`` (a ``ModuleList`` of ``num_experts`` MLPs), ``top_k`` of them per token. The gate is any module: a
    quantizer replaces the ``nn.Linear`` (torchao's fpa4w, ``UIntxWeightOnlyQuantizedLinear``)."""
    return (all(hasattr(module, name) for name in _BLOCK_ATTRIBUTES) and isinstance(module.gate, nn.Module)
            and isinstance(module.experts, nn.ModuleList) and len(module.experts) == module.num_experts)


def dense_forward(block: nn.Module, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``block``'s output with every expert run on every token, weighted by the router's top-k choice: what its own
    ``forward`` computes, as ``(hidden_states, router_logits)``, with no data-dependent shape. A block with a
    ``shared_expert`` (Qwen3-Next) adds it as its ``forward`` does, gated by ``sigmoid(shared_expert_gate(x))``."""
    if not is_experts_block(block):
        lacking = [name for name in _BLOCK_ATTRIBUTES if not hasattr(block, name)]
        raise NotAnExpertsBlock(f"{type(block).__name__} is not a sparse MoE block (it lacks "
                                f"{', '.join(lacking) or 'a gate module and a ModuleList of num_experts experts'})")
    batch_size, sequence_length, hidden_dim = hidden_states.shape
    tokens = hidden_states.reshape(-1, hidden_dim)
    router_logits = block.gate(tokens)
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, block.top_k, dim=-1)
    if block.norm_topk_prob:
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(tokens.dtype)
    # [tokens, experts]: each token's weight for each expert, zero where the router did not choose it.
    combine = torch.zeros_like(router_logits, dtype=tokens.dtype).scatter(1, selected_experts, routing_weights)
    final_hidden_states = torch.zeros_like(tokens)
    for index, expert in enumerate(block.experts):
        final_hidden_states = final_hidden_states + expert(tokens) * combine[:, index, None]
    shared_expert = getattr(block, "shared_expert", None)
    if shared_expert is not None:
        final_hidden_states = final_hidden_states + (
            torch.sigmoid(block.shared_expert_gate(tokens)) * shared_expert(tokens))
    return final_hidden_states.reshape(batch_size, sequence_length, hidden_dim), router_logits


@contextlib.contextmanager
def dense_experts(model: nn.Module) -> Iterator[list[nn.Module]]:
    """While in effect, every sparse MoE block in ``model`` (:func:`is_experts_block`) computes
    :func:`dense_forward`; the blocks are yielded (none: ``model`` has no such block and is left as it is). Each
    block's own ``forward`` comes back on exit, so the model outside the ``with`` is the one its author wrote, for
    eager to be compared against. See the module's docstring for an example."""
    blocks = [module for module in model.modules() if is_experts_block(module)]
    swapped: list[tuple[nn.Module, Any]] = []
    try:
        for block in blocks:
            swapped.append((block, block.__dict__.get("forward")))
            block.forward = types.MethodType(dense_forward, block)
        yield blocks
    finally:
        for block, own in swapped:
            if own is None:
                del block.forward
            else:
                block.forward = own
