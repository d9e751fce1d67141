"""``--suite metal``: the models ExecuTorch's Metal backend is used for, built as upstream exports them.

Upstream's Metal CI (pytorch/executorch ``.github/workflows/metal.yml``, ``.ci/scripts/export_model_artifact.sh``)
exports speech models and LLM decoders in bfloat16, ``non-quantized`` and ``quantized-int4-metal``
(``--qlinear fpa4w``: torchao's ``UIntxWeightOnlyConfig(group_size=32, bitwidth=4)``); decoders go through
optimum-executorch, which wraps transformers' ``TorchExportableModuleForDecoderOnlyLM`` (a static KV cache,
the prefill with a dynamic sequence length, the decode step one token). Each model here is that export of a
tiny random-weight config of the family (nothing downloaded), as ``metal/<model>-<variant>``:

=================  =====================================================================================
model              stands for
=================  =====================================================================================
llama-prefill      a Llama-style decoder (Qwen3, Llama 3), prompt of 1..31 tokens into a 32-token cache
llama-decode       the same decoder's one-token step at position 3
gemma3-decode      Gemma3: head_dim 256, sliding-window and global layers (transformers' hybrid cache)
whisper-encoder    Whisper's audio encoder (whisper-small, large-v3-turbo), 16 mel bins
parakeet-encoder   Parakeet-TDT's FastConformer encoder, 16 mel features
qwen35-moe-decode  ExecuTorch's own Qwen 3.5 MoE (examples/models/qwen3_5_moe, its --tiny-test config at two
                   layers): gated delta-rule linear attention (Qwen3-Next's), full attention, top-2 of 8 experts
                   through metal::gather_qmv; the decode step
qwen35-moe-prefill the same model's prefill over 2..31 tokens
parakeet-tdt       Parakeet-TDT as upstream's examples/models/parakeet/export_parakeet_tdt.py exports it: a program of
                   three methods, ``encoder`` (FastConformer, its output projected for the joint), ``decoder_step``
                   (the prediction network's embedding and 2-layer LSTM, one token, its state in and out) and
                   ``joint`` (token and duration argmax); transformers' Parakeet encoder, the rest written from
                   NeMo's RNNT modules as that script calls them
qwen3-moe-prefill  transformers' Qwen3-MoE (top-2 of 8 experts), its prefill over 1..31 tokens, exported with its
                   experts dense (shimkit.passes.experts: transformers' expert loop stops torch.export)
=================  =====================================================================================

Variants: ``bf16`` (upstream's dtype for Metal), ``f32``, and for the dense decoders ``int4`` (bf16 activations,
fpa4w weights: every ``nn.Linear`` but the embedding quantized as upstream's ``--qlinear fpa4w`` does). Qwen3-MoE
has no ``int4`` here: it lowers and executes, but at 31 tokens it is 0.022 from eager against a 0.02 bound, judged
against eager alone (torchao's 4-bit ops have no float64 form), where its quantized router may choose other experts
near a tie; not yet told apart from a kernel's error.
Voxtral's audio encoder is Whisper's; its text decoder is a Llama-style decoder. The MoE is upstream's own
module prepared by upstream's own ``_prepare_and_quantize_metal`` (its int4 experts are the only form upstream
exports for Metal): ``int4`` with bf16 activations as upstream exports it, ``f32`` with float32 activations over
the same int4 weights. transformers' Qwen3-MoE and Qwen3-Next route experts with data-dependent shapes that
``torch.export`` refuses; upstream exports its own module instead, and the audit exports transformers' with its
experts in the dense form (:func:`shimkit.passes.experts.dense_experts`, applied with shimkit's plugins).
transformers' Qwen3-Next is not here: its experts take the same form, but it stops before them, at
``_update_linear_attn_mask`` (``if cache_position[0] > 0``, a decision on data), and its linear-attention cache is
not the static cache transformers' exportable wrapper makes.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator

MODELS = ("llama-prefill", "llama-decode", "gemma3-decode", "whisper-encoder", "parakeet-encoder",
          "qwen35-moe-decode", "qwen35-moe-prefill", "qwen3-moe-prefill", "parakeet-tdt")
# Upstream's Metal MoE is int4 only (its experts run through metal::gather_qmv): bf16 activations ("int4", as
# upstream exports it) and float32 activations ("f32") over the same int4 weights.
MOE = ("qwen35-moe-decode", "qwen35-moe-prefill")
DECODERS = ("llama-prefill", "llama-decode", "gemma3-decode", "parakeet-tdt")
CACHE_LENGTH = 32
INT4_GROUP_SIZE = 32  # upstream's --qlinear fpa4w


def names() -> list[str]:
    """Every ``<model>-<variant>`` of the suite."""
    return [f"{model}-{variant}" for model in MODELS
            for variant in (("int4", "f32") if model in MOE else ("bf16", "f32", "int4") if model in DECODERS
                            else ("bf16", "f32"))]


def build(name: str) -> Any:
    """``(model, example_inputs[, dynamic_shapes])`` for a name of :func:`names`, or a dict of them by method (a
    program of several: parakeet-tdt)."""
    import torch

    model, _, variant = name.rpartition("-")
    dtype = torch.float32 if variant == "f32" else torch.bfloat16
    return _BUILDERS[model](dtype, variant == "int4")


def _small_decoder(config: Any, dtype: Any, int4: bool) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    model.generation_config.cache_implementation = "static"
    if int4:
        _quantize_fpa4w(model)
    return model


def _quantize_fpa4w(model: Any) -> None:
    """Upstream's ``--qlinear fpa4w``: torchao's 4-bit weight-only config on every linear layer."""
    import shimkit.plugins.torchao_linear  # noqa: F401  (torchao's 4-bit ops where its MPS library is absent)
    from torchao.experimental.quant_api import UIntxWeightOnlyConfig
    from torchao.quantization import quantize_

    quantize_(model, UIntxWeightOnlyConfig(group_size=INT4_GROUP_SIZE, bitwidth=4))


def _decoder_step(model: Any, cache_length: int = CACHE_LENGTH) -> Any:
    """``model`` wrapped as optimum-executorch exports it (a static cache of ``cache_length`` positions), called
    with positional tensors."""
    import torch
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    class DecoderStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Built without autograd, as upstream's export scripts run: the cache is allocated here.
            with torch.no_grad():
                self.exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1,
                                                                        max_cache_len=cache_length)

        def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
            return self.exportable(input_ids=input_ids, cache_position=cache_position)

        def _apply(self, fn: Any, recurse: bool = True) -> Any:
            # transformers' cache layers hold the tensors its wrapper registers as buffers: .to() replaces the
            # buffers alone, and the layers would go on writing the old ones (the float64 reference, a GPU).
            super()._apply(fn, recurse)
            for module in self.modules():
                cache = getattr(module, "static_cache", None) or getattr(module, "cache", None)
                for index, layer in enumerate(getattr(cache, "layers", ())):
                    layer.keys = getattr(module, f"key_cache_{index}")
                    layer.values = getattr(module, f"value_cache_{index}")
            return self

    return DecoderStep()


def _llama(prefill: bool) -> Callable[[Any, bool], Any]:
    def make(dtype: Any, int4: bool) -> Any:
        import torch
        from transformers import LlamaConfig

        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64)
        step = _decoder_step(_small_decoder(config, dtype, int4))
        if not prefill:
            return step, (torch.tensor([[5]]), torch.tensor([3]))
        length = torch.export.Dim("prompt_length", min=1, max=CACHE_LENGTH - 1)
        return (step, (torch.tensor([[5, 6, 7, 8]]), torch.arange(4)),
                {"input_ids": {1: length}, "cache_position": {0: length}})

    return make


def _qwen3_moe_prefill(dtype: Any, int4: bool) -> Any:
    import torch
    from transformers import Qwen3MoeConfig

    config = Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                            num_experts_per_tok=2, norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64)
    length = torch.export.Dim("prompt_length", min=1, max=CACHE_LENGTH - 1)
    return (_decoder_step(_small_decoder(config, dtype, int4)), (torch.tensor([[5, 6, 7, 8]]), torch.arange(4)),
            {"input_ids": {1: length}, "cache_position": {0: length}})


def _gemma3(dtype: Any, int4: bool) -> Any:
    import torch
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=256, vocab_size=128, max_position_embeddings=64,
                              sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    return _decoder_step(_small_decoder(config, dtype, int4)), (torch.tensor([[5]]), torch.tensor([3]))


def _whisper_encoder(dtype: Any, int4: bool) -> Any:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                           num_mel_bins=16, max_source_positions=32)
    return _encoder(WhisperEncoder(config), dtype, (1, 16, 64))  # (batch, mel bins, frames)


def _parakeet_encoder(dtype: Any, int4: bool) -> Any:
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet import ParakeetEncoder

    config = ParakeetEncoderConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                   num_mel_bins=16, subsampling_conv_channels=16)
    return _encoder(ParakeetEncoder(config), dtype, (1, 64, 16))  # (batch, frames, mel bins)


def _parakeet_tdt(dtype: Any, int4: bool) -> dict[str, Any]:
    """Upstream's three Metal methods of Parakeet-TDT (``export_all``: ``EncoderWithProjection``, ``DecoderStep``,
    ``JointWithArgmax``), with ``--qlinear fpa4w --qlinear_encoder fpa4w`` for ``int4`` (the joint stays as it is,
    as upstream quantizes the encoder and the decoder step alone)."""
    import torch
    from torch import nn
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet import ParakeetEncoder

    config = ParakeetEncoderConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                   num_mel_bins=16, subsampling_conv_channels=16)
    vocab, durations, pred_hidden, joint_hidden, layers = 32, 5, 32, 48, 2

    class EncoderWithProjection(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = ParakeetEncoder(config)
            self.project_encoder = nn.Linear(config.hidden_size, joint_hidden)

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return self.project_encoder(self.encoder(features).last_hidden_state)

    class DecoderStep(nn.Module):
        """NeMo's RNNT prediction network, ``predict(y=token, state=[h, c], add_sos=False)``: the token's embedding
        (the blank, ``vocab``, is its padding index) through the LSTM, projected for the joint."""

        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab + 1, pred_hidden, padding_idx=vocab)
            self.rnn = nn.LSTM(pred_hidden, pred_hidden, num_layers=layers, batch_first=True)
            self.project_prednet = nn.Linear(pred_hidden, joint_hidden)

        def forward(self, token: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
            g, (h, c) = self.rnn(self.embedding(token), (h, c))
            return self.project_prednet(g), h, c

    class JointWithArgmax(nn.Module):
        """NeMo's ``joint_after_projection``: ReLU of the sum through the joint's linear layer, split into token
        and duration logits, each argmaxed."""

        def __init__(self) -> None:
            super().__init__()
            self.joint_net = nn.Sequential(nn.ReLU(), nn.Linear(joint_hidden, vocab + 1 + durations))

        def forward(self, f: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = self.joint_net(f + g).squeeze()
            return logits[: vocab + 1].argmax(), logits[vocab + 1:].argmax()

    generator = torch.Generator().manual_seed(0)
    encoder, decoder, joint = (m.to(dtype).eval() for m in (EncoderWithProjection(), DecoderStep(), JointWithArgmax()))
    if int4:
        _quantize_fpa4w(encoder)
        _quantize_fpa4w(decoder)
    state = torch.zeros(layers, 1, pred_hidden, dtype=dtype)
    return {
        "encoder": (encoder, (torch.randn(1, 64, 16, generator=generator).to(dtype),)),
        "decoder_step": (decoder, (torch.tensor([[vocab]]), state, state.clone())),
        "joint": (joint, (torch.randn(1, 1, joint_hidden, generator=generator).to(dtype),
                          torch.randn(1, 1, joint_hidden, generator=generator).to(dtype))),
    }


def _encoder(encoder: Any, dtype: Any, features: tuple[int, ...]) -> Any:
    """An audio encoder in ``dtype`` returning its last hidden state, and random features of that shape."""
    import torch

    encoder = encoder.to(dtype).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return self.encoder(features).last_hidden_state

    return LastHiddenState(), (torch.randn(*features, generator=torch.Generator().manual_seed(0)).to(dtype),)


def _qwen35_moe(prefill: bool) -> Callable[[Any, bool], Any]:
    """ExecuTorch's own Qwen 3.5 MoE (``examples/models/qwen3_5_moe``: gated delta-rule linear attention, full
    attention, top-2 of 8 experts and a shared expert), its ``--tiny-test`` config at two layers and a 32-token
    cache, prepared by upstream's ``_prepare_and_quantize_metal`` as ``export.py --backend metal --qlinear fpa4w``
    prepares it (experts to MLX affine INT4 for ``metal::gather_qmv``, linears fpa4w, the delta rule to
    ``metal::gated_delta_rule``); the decode step, or the prefill over 2..31 tokens as upstream exports them."""

    def make(dtype: Any, int4: bool) -> Any:
        import argparse

        import torch
        from executorch.examples.models.qwen3_5_moe.export import _prepare_and_quantize_metal
        from executorch.examples.models.qwen3_5_moe.model import Qwen35MoE, Qwen35MoEConfig

        config = Qwen35MoEConfig(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_kv_heads=2, head_dim=64, partial_rotary_factor=0.25, linear_num_key_heads=2,
                                 linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
                                 linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2,
                                 moe_intermediate_size=128, shared_expert_intermediate_size=128,
                                 full_attention_interval=2, rope_theta=10_000.0, max_seq_len=CACHE_LENGTH)
        generator = torch.Generator().manual_seed(42)
        model = Qwen35MoE(config).to(dtype).eval()
        for parameter in model.parameters():  # as upstream's --tiny-test initialises it
            parameter.requires_grad_(False)
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
        with torchao_mps_stand_in():
            _prepare_and_quantize_metal(model, config, argparse.Namespace(qlinear="fpa4w", qlinear_group_size=32))
        if not prefill:
            return model, (torch.tensor([[0]]), torch.tensor([0]))
        longest = CACHE_LENGTH - 1
        length = torch.export.Dim("seq_len", min=2, max=longest)
        return (model, (torch.zeros((1, longest), dtype=torch.long), torch.arange(longest)),
                {"tokens": {1: length}, "input_pos": {0: length}})

    return make


@contextlib.contextmanager
def torchao_mps_stand_in() -> Iterator[None]:
    """Upstream's quantizer imports ``torchao.experimental.ops.mps``, which raises off macOS: an empty module
    stands in for it while the model is prepared (the ops it registers come from the ``torchao-linear`` plugin)."""
    import sys
    import types

    import shimkit.plugins.torchao_linear  # noqa: F401
    name = "torchao.experimental.ops.mps"
    try:
        importlib.import_module(name)
        yield
        return
    except (ImportError, RuntimeError):
        pass
    sys.modules[name] = types.ModuleType(name)
    try:
        yield
    finally:
        sys.modules.pop(name, None)


_BUILDERS: dict[str, Callable[[Any, bool], Any]] = {
    "llama-prefill": _llama(prefill=True), "llama-decode": _llama(prefill=False), "gemma3-decode": _gemma3,
    "whisper-encoder": _whisper_encoder, "parakeet-encoder": _parakeet_encoder,
    "qwen35-moe-decode": _qwen35_moe(prefill=False), "qwen35-moe-prefill": _qwen35_moe(prefill=True),
    "qwen3-moe-prefill": _qwen3_moe_prefill, "parakeet-tdt": _parakeet_tdt,
}
