"""The CUDA repros of issue 15, as ``shimkit audit`` model factories (``tools/cuda_models.py:NAME``).

Stock ExecuTorch 1.5.1 on an H100 lowers the first two and fails float32 SDPA. ``sdpa_bfloat16`` (16 keys)
stock hands to ExecuTorch's Triton kernel, which computes it wrong (docs/cuda.md); shimkit keeps it ATen
SDPA. ``sdpa_bfloat16_blocks`` (128 keys) checks that shimkit still hands the shapes the kernel computes
right to it. ``gru_sequence``: cuDNN's eager GRU and the lowered matmuls differ by ~2e-4, as far from float64
as each other (a verdict against eager alone called it wrong).
"""

import torch
import torch.nn.functional as F


class _LinearCumsum(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.linear(x), dim=-1)


class _SortValues(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, -1).values


class _Attention(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def _qkv(dtype: torch.dtype, length: int = 16) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 4, length, 64, generator=generator).to(dtype) for _ in range(3))


def linear_cumsum():
    torch.manual_seed(0)
    return _LinearCumsum(), (torch.randn(4, 32),)


def sort_values():
    return _SortValues(), (torch.randn(8, 33, generator=torch.Generator().manual_seed(0)),)


def sdpa_float32():
    return _Attention(), _qkv(torch.float32)


def sdpa_bfloat16():
    return _Attention(), _qkv(torch.bfloat16)


def sdpa_bfloat16_blocks():
    """128 keys, a whole block of triton.sdpa's: the one unmasked shape its kernel computes right."""
    return _Attention(), _qkv(torch.bfloat16, length=128)


def gru_sequence():
    torch.manual_seed(0)
    return torch.nn.GRU(64, 128, num_layers=2, batch_first=True), (torch.randn(4, 32, 64),)
