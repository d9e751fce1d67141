"""Single-pattern models: the seed repro and ops upstream's Metal runtime has no kernel for."""

from __future__ import annotations

import torch
from torch import nn

from shimkit.audit.zoo._seeded import seeded


class SplitLinear(nn.Module):
    """The seed issue's repro, verbatim: split feeds a linear (batch 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(x, 4, dim=1)
        return self.fc(a + b)


@seeded
def seed_split_linear():
    return SplitLinear(), (torch.randn(1, 8),)


class RunningMean(nn.Module):
    """Prefix sums as a masked running mean over time, the way length-aware models use cumsum."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        totals = torch.cumsum(self.proj(x) * mask.unsqueeze(-1), dim=1)
        counts = torch.cumsum(mask, dim=1).clamp(min=1).unsqueeze(-1)
        return totals / counts


@seeded
def cumsum_model():
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]])
    return RunningMean(), (torch.randn(1, 8, 16), mask)


class BiasedBatchMatmul(nn.Module):
    """Attention-score style ``beta * bias + alpha * q @ k^T`` through baddbmm."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4, 8, 8))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, q, k.transpose(1, 2), beta=0.5, alpha=0.125)


@seeded
def baddbmm_model():
    return BiasedBatchMatmul(), (torch.randn(4, 8, 16), torch.randn(4, 8, 16))


class PositionIds(nn.Module):
    """RoBERTa's position ids (``cumsum`` of the padding mask) feeding embeddings and a projection,
    exported with a dynamic sequence length: the pattern that once lowered clean and computed wrong
    positions at every length but the example's."""

    def __init__(self, vocab: int = 32, width: int = 16, max_positions: int = 80, padding: int = 1) -> None:
        super().__init__()
        self.padding = padding
        self.tokens = nn.Embedding(vocab, width, padding_idx=padding)
        self.positions = nn.Embedding(max_positions, width, padding_idx=padding)
        self.proj = nn.Linear(width, width)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = input_ids.ne(self.padding).int()
        position_ids = torch.cumsum(mask, dim=1).type_as(mask) * mask + self.padding
        return self.proj(self.tokens(input_ids) + self.positions(position_ids))


@seeded
def position_ids_dynamic():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 32, (2, 16), generator=generator)
    seq = torch.export.Dim("seq", min=2, max=64)
    return PositionIds(), (input_ids,), ({1: seq},)


class SortedRouting(nn.Module):
    """Mixture-of-experts style routing: tokens grouped by their top expert with a stable argsort (so
    tokens keep their order within an expert), then each expert's scores sorted descending."""

    def __init__(self, width: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(width, experts)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.router(x).softmax(-1)
        expert = scores.argmax(-1)
        order = torch.argsort(expert, dim=-1, stable=True)
        ranked, _ = torch.sort(scores, dim=1, descending=True)
        return x.gather(1, order.unsqueeze(-1).expand_as(x)), ranked


@seeded
def sorted_routing():
    return SortedRouting(), (torch.randn(2, 12, 16),)
