"""The bundled zoo: small models written in code with random weights, each covering a pattern that
real Metal users hit (the seed's split + linear, MobileNet classifiers, YOLO necks, a Parakeet-like
conformer block, a KV-cache decoder step, cumsum, baddbmm, sort, and spectral models with complex
values inside: an STFT front end, an iSTFT head, an rfft2 filter, an FNet mixer).

Every factory returns ``(model, example_inputs)`` (``position_ids_dynamic`` adds its dynamic shapes) and seeds its own weights without touching the
global RNG, so audits are reproducible and importing the zoo has no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from shimkit.audit.zoo import decoder, ops, spectral, speech, vision


@dataclass(frozen=True)
class ZooModel:
    name: str
    factory: Callable[[], tuple[Any, tuple[Any, ...]]]
    description: str


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("seed_split_linear", ops.seed_split_linear,
             "the seed repro: split then linear (aten::split_copy.Tensor upstream)"),
    ZooModel("mobilenet_v3_small", vision.mobilenet_v3_small,
             "MobileNetV3-small-like: hardswish, squeeze-excite, batch-1 classifier"),
    ZooModel("mobilenet_v2", vision.mobilenet_v2,
             "MobileNetV2-like: inverted residuals, relu6, linear classifier"),
    ZooModel("yolo_neck_head", vision.yolo_neck_head,
             "YOLO-style neck and head: C2f split/cat, SPPF, nearest upsample"),
    ZooModel("segformer_decode_head", vision.segformer_decode_head,
             "SegFormer's all-MLP decode head: tokens laid out as images, bilinear upsampling, 1x1 fuse"),
    ZooModel("conformer_block", speech.conformer_block,
             "Parakeet-like conformer block: depthwise conv1d, SDPA, linear with bias, batch 1"),
    ZooModel("decoder_kv_cache", decoder.decoder_kv_cache,
             "transformer decoder step updating a KV cache with index_copy_ and index_put_"),
    ZooModel("cumsum", ops.cumsum_model, "running sums with cumsum (aoti_torch_mps_cumsum upstream)"),
    ZooModel("baddbmm", ops.baddbmm_model, "batched matmul plus bias with baddbmm"),
    ZooModel("position_ids_dynamic", ops.position_ids_dynamic,
             "RoBERTa-style cumsum position ids with a dynamic sequence length (2..64)"),
    ZooModel("sorted_routing", ops.sorted_routing,
             "MoE-style routing: stable argsort of experts, sorted scores (at::_ops::sort_stable::call upstream)"),
    ZooModel("stft_magnitude", spectral.stft_magnitude,
             "log-magnitude STFT front end (at::_ops::_fft_r2c::call upstream: Metal has no complex dtype)"),
    ZooModel("istft_head", spectral.istft_head,
             "Vocos-like head: polar magnitude/phase resynthesized by istft (complex values inside)"),
    ZooModel("rfft2_global_filter", spectral.rfft2_global_filter,
             "GFNet-like block: a learned complex filter in the rfft2 domain, irfft2 back"),
    ZooModel("fnet_mixer", spectral.fnet_mixer,
             "FNet-like block: 512 tokens mixed by a 2-D FFT's real part (a long transform: the FFT kernel)"),
)}
