"""One decoding step of a transformer decoder that keeps its keys and values in a cache buffer."""

from __future__ import annotations

import torch
from torch import nn

from shimkit.audit.zoo._seeded import seeded


class CachedDecoderStep(nn.Module):
    """Writes the step's key with ``index_copy_`` and its value by index assignment (``index_put_``
    once exported; both forms are in use by LLM exports), then attends over the cache up to the current position."""

    def __init__(self, dim: int = 64, heads: int = 4, max_len: int = 32, vocab: int = 128) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.RMSNorm(dim)
        self.gate_up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, self.head_dim))
        self.register_buffer("positions", torch.arange(max_len))

    def forward(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        x = self.embed(token)  # (1, 1, dim)
        q, k, v = self.qkv(self.norm(x)).view(1, 1, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        self.k_cache.index_copy_(2, position, k)
        self.v_cache[:, :, position] = v
        mask = (self.positions <= position).view(1, 1, 1, -1)
        attended = nn.functional.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.out(attended.transpose(1, 2).reshape(1, 1, -1))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        x = x + self.down(nn.functional.silu(gate) * up)
        return self.lm_head(x)


@seeded
def decoder_kv_cache():
    return CachedDecoderStep(), (torch.tensor([[5]]), torch.tensor([3]))
