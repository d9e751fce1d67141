"""``--suite optimum``: what ``optimum-cli export executorch --recipe metal`` exports, built by optimum-executorch.

Upstream exports its Metal models with optimum-executorch (pytorch/executorch ``.ci/scripts/export_model_artifact.sh``:
``optimum-cli export executorch --model M --task T --recipe metal --dtype bfloat16 --device mps``, with
``--qlinear fpa4w --qlinear_encoder fpa4w`` for ``quantized-int4-metal``). Each model here goes the same way: a
tiny random-weight config of the family (nothing downloaded) saved as a local model folder, with the processor
files the exporter reads; optimum-executorch's own task loader (its quantization included) and exportable module
make the methods, ``export()`` them, and the audit lowers each as its Metal recipe does
(``optimum/exporters/executorch/recipes/metal.py``: ``EdgeCompileConfig(_check_ir_validity=False,
_skip_dim_order=True)``, ``RemovePaddingIdxEmbeddingPass``), stock and with shimkit's registry.

=========  ==================================  =======================================================
model      task                                methods
=========  ==================================  =======================================================
whisper    automatic-speech-recognition        ``encoder`` (80 mel bins, 1 s), ``text_decoder`` (one token, static
                                               self- and cross-attention caches in the model's dtype)
qwen3      text-generation                     ``forward``: prompt of 2..31 tokens into a 32-token static cache
gemma3     text-generation                     ``forward``: Gemma3's text model, sliding-window and global layers
voxtral    multimodal-text-to-text             the audio encoder, the token embedding, the text decoder
=========  ==================================  =======================================================

Variants: ``bf16`` (the script's ``--dtype bfloat16``) and ``int4`` (its ``fpa4w``: every linear layer of the
decoder and the encoder 4-bit, group size 32). ``--device mps`` makes Seq2SeqLMExportableModule skip its
``sampler`` method in bfloat16 (a Metal shader it cannot compile, ``integrations.py``); exported here on the CPU,
the sampler is left out the same way.

The suite needs optimum-executorch and the transformers it pins (5.0.0rc1), not the transformers the rest of
shimkit is tested with: ``pip install shimkit[optimum]`` in an environment of its own (``./dev optimum``).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

MODELS = ("whisper", "qwen3", "gemma3", "voxtral")
VARIANTS = ("bf16", "int4")
MAX_SEQ_LEN = 32
# optimum/exporters/executorch/recipes/metal.py, _lower_to_executorch
RECIPE_COMPILE_OPTIONS = {"_check_ir_validity": False, "_skip_dim_order": True}


def names() -> list[str]:
    """Every ``<model>-<variant>`` of the suite."""
    return [f"{model}-{variant}" for model in MODELS for variant in VARIANTS]


def build(name: str) -> Any:
    """The :class:`~shimkit.audit.loader.Program` optimum-executorch's Metal recipe lowers for ``name``."""
    from optimum.executorch.passes.remove_padding_idx_embedding_pass import RemovePaddingIdxEmbeddingPass

    from shimkit.audit.programs import Lowering, Program

    model, _, variant = name.rpartition("-")
    quantization = {"qlinear": "fpa4w", "qlinear_encoder": "fpa4w"} if variant == "int4" else {}
    with tempfile.TemporaryDirectory(prefix=f"shimkit-optimum-{model}-") as folder, _quiet_loading(), \
            _fpa4w_importable():
        exportable = _BUILDERS[model](Path(folder), dtype="bfloat16", max_seq_len=MAX_SEQ_LEN, **quantization)
        methods = exportable.export()
    methods.pop("sampler", None)  # --device mps, bfloat16 (module docstring)
    if len(methods) == 1:  # the recipe's own rule: a program of one method calls it forward
        methods = {"forward": next(iter(methods.values()))}
    return Program(methods, Lowering(RECIPE_COMPILE_OPTIONS, (RemovePaddingIdxEmbeddingPass(),)))


def _whisper(folder: Path, **options: Any) -> Any:
    from optimum.exporters.executorch.tasks.asr import load_seq2seq_speech_model
    from transformers import (WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizer)

    # chunk_length 1: 100 frames of 80 mel bins, which the encoder halves to max_source_positions.
    config = WhisperConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                           max_source_positions=50, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                           eos_token_id=2, decoder_start_token_id=1)
    WhisperForConditionalGeneration(config).save_pretrained(folder)
    # The exporter reads the feature extractor's shape from the processor, whose tokenizer needs a vocabulary:
    # printable ASCII and no merges.
    (folder / "vocab.json").write_text(json.dumps({"<|endoftext|>": 0, **{chr(c): c - 32 for c in range(33, 127)}}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80, chunk_length=1), tokenizer).save_pretrained(folder)
    return load_seq2seq_speech_model(str(folder), **options)


def _causal_lm(make_config: Callable[[], Any]) -> Callable[..., Any]:
    def load(folder: Path, **options: Any) -> Any:
        from optimum.exporters.executorch.tasks.causal_lm import load_causal_lm_model
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_config(make_config()).save_pretrained(folder)
        options.pop("qlinear_encoder", None)  # the text-generation task has no encoder to quantize
        return load_causal_lm_model(str(folder), **options)

    return load


def _qwen3_config() -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64)


def _gemma3_config() -> Any:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=256, vocab_size=128, max_position_embeddings=64,
                            sliding_window=8, layer_types=["sliding_attention", "full_attention"])


def _voxtral(folder: Path, **options: Any) -> Any:
    from optimum.exporters.executorch.tasks.multimodal_text_to_text import load_multimodal_text_to_text_model
    from transformers import VoxtralConfig, VoxtralForConditionalGeneration, WhisperFeatureExtractor

    # One second of audio is 64 frames of 16 mel bins (hop 250), which the encoder's convolutions halve to its 32
    # positions; the projector joins 4 encoder frames into one text embedding.
    config = VoxtralConfig(
        audio_config={"vocab_size": 128, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 1,
                      "num_attention_heads": 2, "num_mel_bins": 16, "max_source_positions": 32},
        text_config={"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                     "max_position_embeddings": 128, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 11},
        audio_token_id=_VOXTRAL_AUDIO_TOKEN, projector_hidden_act="gelu")
    VoxtralForConditionalGeneration(config).save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=250, chunk_length=1,
                            n_fft=400).save_pretrained(folder)
    # This loader reads max_length (the command line's --max_seq_len does not reach it: 2048 there).
    exportable = load_multimodal_text_to_text_model(str(folder), max_length=options.pop("max_seq_len"), **options)
    return _WithProcessor(exportable, _VoxtralProcessor)


# VoxtralProcessor's audio placeholder token (processing_voxtral.py), which the model's config must name too.
_VOXTRAL_AUDIO_TOKEN = 24


class _VoxtralProcessor:
    """What the exporter asks of Voxtral's processor (``AudioExportableModule``: ``apply_chat_template`` on a
    conversation with an audio URL), answered locally: VoxtralProcessor needs mistral_common's tokenizer and fetches
    that URL. The audio is a 440 Hz tone padded to whole chunks, its features made by the model's own
    ``WhisperFeatureExtractor`` and cut into chunks as ``VoxtralProcessor._retrieve_input_features`` does."""

    def __init__(self, folder: str) -> None:
        from transformers import AutoConfig, WhisperFeatureExtractor

        self.feature_extractor = WhisperFeatureExtractor.from_pretrained(folder)
        self.frames = 2 * AutoConfig.from_pretrained(folder).audio_config.max_source_positions

    @classmethod
    def from_pretrained(cls, folder: str, **_: Any) -> _VoxtralProcessor:
        return cls(folder)

    def apply_chat_template(self, conversation: Any, **_: Any) -> Any:
        import numpy
        import torch
        from transformers import BatchFeature

        extractor = self.feature_extractor
        rate, chunk = extractor.sampling_rate, extractor.n_samples
        chunks = []
        for message in conversation:
            for part in message["content"]:
                if part.get("type") == "audio":
                    tone = 0.1 * numpy.sin(2 * numpy.pi * 440 * numpy.arange(int(0.6 * rate)) / rate)
                    clip = numpy.pad(tone.astype(numpy.float32), (0, -len(tone) % chunk))
                    features = extractor(clip, sampling_rate=rate, return_tensors="pt")["input_features"]
                    # As VoxtralProcessor lays them out: the clip's frames cut into chunks along the batch.
                    chunks.append(features.reshape(extractor.feature_size, -1, self.frames).transpose(0, 1))
        tokens = [1, *[_VOXTRAL_AUDIO_TOKEN] * (self.frames // 2 // 4), 2]
        return BatchFeature(data={"input_ids": torch.tensor([tokens]), "input_features": torch.cat(chunks)})


class _WithProcessor:
    """An exportable module whose ``export()`` reads the processor through ``integrations.AutoProcessor``, with
    ``processor`` in its place while it exports."""

    def __init__(self, exportable: Any, processor: type) -> None:
        self.exportable, self.processor = exportable, processor

    def export(self) -> dict[str, Any]:
        from unittest import mock

        with mock.patch("optimum.exporters.executorch.integrations.AutoProcessor", self.processor):
            return self.exportable.export()


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """transformers' per-weight progress bar, off while a model folder loads (hundreds of lines a model)."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def _fpa4w_importable() -> Any:
    from shimkit.audit.metal_suite import torchao_mps_stand_in

    return torchao_mps_stand_in()


_BUILDERS: dict[str, Callable[..., Any]] = {
    "whisper": _whisper, "qwen3": _causal_lm(_qwen3_config), "gemma3": _causal_lm(_gemma3_config),
    "voxtral": _voxtral,
}
