"""Models at the sizes users deploy, as ``shimkit audit`` factories (``benchmarks/realsize_models.py:NAME``), for
benchmarks/bench_execute.py (issue 69 part 3). Random weights from the real configs (nothing is downloaded), float32:

* ``llama_1b_layers``: Llama-3.2-1B's shape (hidden 2048, 32 query and 8 key/value heads of 64, ffn 8192, its
  128256-token vocabulary and tied embedding) at two of its 16 layers, a 512-token prompt into a 520-token static
  cache, as optimum-executorch exports the decoder (transformers' ``TorchExportableModuleForDecoderOnlyLM``);
* ``smollm_135m``: SmolLM-135M whole (30 layers, hidden 576, 9 query and 3 key/value heads, ffn 1536, vocabulary
  49152), a 64-token prompt into a 72-token cache;
* ``whisper_tiny_encoder``: whisper-tiny's encoder (4 layers, d_model 384, 6 heads, 80 mel bins) on 10 s of audio
  (1000 mel frames; its positions cut to the 500 they need).

Each takes one static input (no dynamic dimension), so a verdict runs one size.
"""

from __future__ import annotations

from typing import Any

import torch

from shimkit.audit.metal_suite import _decoder_step, _encoder


def _decoder(config: Any, prompt: int, cache: int) -> tuple[Any, tuple[torch.Tensor, ...]]:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.cache_implementation = "static"
    step = _decoder_step(model, cache)
    tokens = torch.randint(0, config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1))
    return step, (tokens, torch.arange(prompt))


def llama_1b_layers():
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=1024,
                         rope_theta=500000.0, tie_word_embeddings=True)
    return _decoder(config, prompt=512, cache=520)


def smollm_135m():
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=2048,
                         rope_theta=10000.0, tie_word_embeddings=True)
    return _decoder(config, prompt=64, cache=72)


def whisper_tiny_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                           num_mel_bins=80, max_source_positions=500)
    return _encoder(WhisperEncoder(config), torch.float32, (1, 80, 1000))
