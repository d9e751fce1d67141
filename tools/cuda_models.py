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


class _Upsampler(torch.nn.Module):
    """A decoder's upsampling path: ConvTranspose2d (stride 2, output padding), a grouped one, then a 1x1 head."""

    def __init__(self) -> None:
        super().__init__()
        self.up1 = torch.nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)
        self.up2 = torch.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.head = torch.nn.Conv2d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.up2(torch.relu(self.up1(x)))))


class _LatentGenerator(torch.nn.Module):
    """A DCGAN generator's first layers: a latent spread into 4x4, then doubled."""

    def __init__(self) -> None:
        super().__init__()
        self.project = torch.nn.ConvTranspose2d(64, 32, 4)
        self.up = torch.nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.up(torch.relu(self.project(z))))


class _ScatterAddConstantIndex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = torch.tensor([[0, 2, 1, 3], [3, 3, 0, 1]])  # made in forward: a constant, not a buffer
        return torch.zeros(2, 4).scatter_add(1, index, x)


class _NonzeroOfWhere(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, 0).nonzero()


def conv_transpose_upsampler():
    torch.manual_seed(0)
    return _Upsampler(), (torch.randn(2, 32, 8, 8),)


def latent_generator():
    torch.manual_seed(0)
    return _LatentGenerator(), (torch.randn(4, 64, 1, 1),)


def scatter_add_constant_index():
    return _ScatterAddConstantIndex(), (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),)


def nonzero_of_where():
    return _NonzeroOfWhere(), (torch.randn(6, 5, generator=torch.Generator().manual_seed(0)),)


class _PhaseHead(torch.nn.Module):
    """An iSTFT vocoder head as written: magnitude times exp(1j * phase), resynthesized by istft."""

    def __init__(self, frame: int = 32, hop: int = 8, features: int = 16):
        super().__init__()
        self.frame, self.hop = frame, hop
        self.register_buffer("window", torch.hann_window(frame))
        self.out = torch.nn.Linear(features, frame + 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        magnitude, phase = self.out(features).transpose(1, 2).chunk(2, dim=1)
        spectrum = torch.exp(magnitude).clamp(max=1e2) * torch.exp(1j * phase)
        return torch.istft(spectrum, self.frame, hop_length=self.hop, window=self.window, center=True)


class _KaiserSpectrogram(torch.nn.Module):
    """A magnitude spectrogram whose Kaiser window is built in ``forward`` (``aten.i0`` once decomposed)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        window = torch.kaiser_window(64, periodic=True, beta=8.0, device=x.device)
        return torch.stft(x, 64, hop_length=16, window=window, return_complex=True).abs()


class _UniqueCounts(torch.nn.Module):
    def forward(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.unique(labels, sorted=True, return_inverse=True, return_counts=True)


class _StableSort(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sort(x, dim=-1, stable=True)


def phase_head():
    torch.manual_seed(0)
    return _PhaseHead(), (torch.randn(2, 12, 16),)


def kaiser_spectrogram():
    return _KaiserSpectrogram(), (torch.randn(2, 1024, generator=torch.Generator().manual_seed(0)),)


def unique_counts():
    return _UniqueCounts(), (torch.randint(0, 7, (64,), generator=torch.Generator().manual_seed(0)),)


def stable_sort():
    # Few distinct values: ties decide the indices, which only a stable sort fixes.
    return _StableSort(), (torch.randint(0, 4, (3, 50), generator=torch.Generator().manual_seed(0)).float(),)
