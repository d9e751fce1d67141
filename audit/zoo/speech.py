"""A Parakeet-like (FastConformer) encoder block, the model the seed's Parakeet PR lowers to Metal."""

from __future__ import annotations

import torch
from torch import nn

from shimkit.audit.zoo._seeded import seeded


class FeedForward(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.up(self.norm(x))))


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, dim = x.shape
        q, k, v = self.qkv(self.norm(x)).view(batch, time, 3, self.heads, dim // self.heads).unbind(2)
        attended = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.out(attended.transpose(1, 2).reshape(batch, time, dim))


class ConvModule(nn.Module):
    def __init__(self, dim: int, kernel: int = 9) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pointwise_in = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.batch_norm = nn.BatchNorm1d(dim)
        self.pointwise_out = nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.glu(self.pointwise_in(self.norm(x).transpose(1, 2)), dim=1)
        y = nn.functional.silu(self.batch_norm(self.depthwise(y)))
        return self.pointwise_out(y).transpose(1, 2)


class ConformerBlock(nn.Module):
    """Macaron feed-forwards around attention and convolution, as in FastConformer."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.ff1 = FeedForward(dim)
        self.attention = SelfAttention(dim, heads)
        self.conv = ConvModule(dim)
        self.ff2 = FeedForward(dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attention(x)
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.norm(x)


@seeded
def conformer_block():
    return ConformerBlock(), (torch.randn(1, 32, 64),)
