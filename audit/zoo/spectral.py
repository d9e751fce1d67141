"""Spectral models: an STFT magnitude front end, a Vocos-like iSTFT head, a GFNet-like rfft2 global
filter block and an FNet-like token mixer over 512 tokens (long enough for the FFT kernel on mps). Their inputs and outputs are real; the complex values in between are what shimkit's
``complex_pairs`` pass carries as real pairs (Metal has no complex dtype)."""

from __future__ import annotations

import torch
from torch import nn

from shimkit.audit.zoo._seeded import seeded

FRAME = 64
HOP = 16


class StftMagnitude(nn.Module):
    """Log-magnitude spectrogram projected to features, as a speech front end."""

    def __init__(self, features: int = 32) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(FRAME))
        self.project = nn.Linear(FRAME // 2 + 1, features)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        spectrum = torch.stft(waveform, FRAME, hop_length=HOP, window=self.window, return_complex=True)
        return self.project(torch.log(spectrum.abs() + 1e-5).transpose(1, 2))


class IstftHead(nn.Module):
    """Features to magnitude and phase per frame, resynthesized by the inverse STFT (Vocos)."""

    def __init__(self, features: int = 32) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(FRAME))
        self.out = nn.Linear(features, FRAME + 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        magnitude, phase = self.out(features).transpose(1, 2).chunk(2, dim=1)
        spectrum = torch.polar(torch.exp(magnitude).clamp(max=1e2), phase)
        return torch.istft(spectrum, FRAME, hop_length=HOP, window=self.window, center=True)


class GlobalFilterBlock(nn.Module):
    """GFNet's global filter: tokens on a grid, a learned complex filter applied in the rfft2 domain."""

    def __init__(self, dim: int = 16, height: int = 8, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.filter = nn.Parameter(torch.randn(height, width // 2 + 1, dim, 2) * 0.02)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, height, width, dim = x.shape
        spectrum = torch.fft.rfft2(self.norm(x), dim=(1, 2), norm="ortho")
        filtered = torch.fft.irfft2(spectrum * torch.view_as_complex(self.filter), s=(height, width), dim=(1, 2),
                                    norm="ortho")
        return x + self.mlp(filtered)


class FourierMixer(nn.Module):
    """FNet's encoder block: tokens mixed by the real part of a 2-D DFT over hidden and sequence dims."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real
        x = self.norm(x + mixed)
        return x + self.feed_forward(x)


@seeded
def stft_magnitude():
    return StftMagnitude(), (torch.randn(1, 400),)


@seeded
def istft_head():
    return IstftHead(), (torch.randn(1, 21, 32),)


@seeded
def rfft2_global_filter():
    return GlobalFilterBlock(), (torch.randn(1, 8, 8, 16),)


@seeded
def fnet_mixer():
    return FourierMixer(), (torch.randn(1, 512, 32),)
