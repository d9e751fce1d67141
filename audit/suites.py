"""Model suites built from installed libraries: ``shimkit audit --suite transformers[:PATTERN]``.

Each suite model is a MODEL argument of its own, ``<suite>/<family>`` (``transformers/bert``): built from
the library's config class with small sizes and random weights (seeded, the caller's RNG untouched),
never downloaded. A suite needs its library (``pip install shimkit[suites]``); asking for one that is
not installed is a clear error naming the package.

* ``transformers``: one model per family below, from ``AutoModel.from_config`` with one or two layers,
  width 32 and a vocabulary of 128; text models take 8 token ids, vision models a 32x32 image, speech
  models a short waveform or spectrogram; encoder-decoders get 4 decoder token ids. The audited output
  is the first tensor the model returns (``last_hidden_state``).

* ``metal``: what ExecuTorch's Metal backend is used for, exported as upstream exports it (bfloat16, float32
  and fpa4w int4; LLM decoders with a static KV cache, speech encoders): :mod:`shimkit.audit.metal_suite`.

* ``optimum``: what ``optimum-cli export executorch --recipe metal`` exports (Whisper, Qwen3, Gemma3, Voxtral),
  built by optimum-executorch itself, a program of several methods each: :mod:`shimkit.audit.optimum_suite`.
  It needs optimum-executorch and the transformers it pins (``pip install shimkit[optimum]``, ``./dev optimum``).

torchvision and timm suites are not offered: PyPI's Linux torchvision wheels are CUDA builds whose
operators do not load against the CPU torch this project pins, and timm needs torchvision.
"""

from __future__ import annotations

import fnmatch
import importlib.util
from typing import Any

SUITES = ("transformers", "metal", "optimum")
# The module each suite is built from, and what installs it.
_LIBRARY = {"transformers": "transformers", "metal": "transformers", "optimum": "optimum.exporters.executorch"}
_INSTALL = {"transformers": "pip install shimkit[suites]", "metal": "pip install shimkit[suites]",
            "optimum": "pip install shimkit[optimum] (an environment of its own: ./dev optimum)"}
TRANSFORMERS_FAMILIES = (
    "bert", "distilbert", "roberta", "albert", "electra", "gpt2", "gpt_neo", "llama", "mistral", "qwen2", "phi",
    "gemma", "t5", "bart", "vit", "deit", "convnext", "swin", "segformer", "whisper", "wav2vec2",
)
# Small sizes for whichever of these attributes a config has.
_SMALL = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64, "embedding_size": 32,
    "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_embd": 32, "n_layer": 1,
    "n_head": 2, "n_positions": 64, "num_layers": 1, "num_heads": 2, "d_ff": 64, "d_kv": 16, "image_size": 32,
    "patch_size": 8, "head_dim": 16, "num_decoder_layers": 1, "max_source_positions": 32,
    "max_target_positions": 32, "num_mel_bins": 16, "attention_types": [[["global", "local"], 1]],
    "window_size": 4, "max_window_layers": 1, "conv_dim": (16, 16), "conv_stride": (5, 2), "conv_kernel": (10, 3),
    "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2, "pad_token_id": 0,
    "num_feat_extract_layers": 2,
}
# Families whose configs spell their sizes per stage.
_FAMILY = {
    "convnext": {"num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1]},
    "swin": {"embed_dim": 16, "depths": [1, 1], "num_heads": [1, 2], "window_size": 2, "patch_size": 4},
    "segformer": {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [16, 32],
                  "patch_sizes": [7, 3], "strides": [4, 2], "num_attention_heads": [1, 2], "mlp_ratios": [2, 2],
                  "decoder_hidden_size": 32},
}


class SuiteError(ValueError):
    """A ``--suite`` argument naming no suite, or a suite whose library is not installed."""


def suite_models(argument: str) -> list[str]:
    """The MODEL arguments of ``--suite SUITE[:PATTERN]`` (fnmatch on the family name)."""
    suite, _, pattern = argument.partition(":")
    if suite not in SUITES:
        raise SuiteError(f"--suite {argument!r}: unknown suite {suite!r} (suites: {', '.join(SUITES)})")
    if not _installed(suite):
        raise SuiteError(f"--suite {suite} needs {_LIBRARY[suite]}: {_INSTALL[suite]}")
    offered = _families(suite)
    families = [f for f in offered if fnmatch.fnmatchcase(f, pattern or "*")]
    if not families:
        raise SuiteError(f"--suite {argument!r}: no {suite} family matches {pattern!r} "
                         f"(families: {', '.join(offered)})")
    return [f"{suite}/{family}" for family in families]


def _installed(suite: str) -> bool:
    try:
        return importlib.util.find_spec(_LIBRARY[suite]) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def _families(suite: str) -> list[str]:
    if suite == "metal":
        from shimkit.audit.metal_suite import names

        return names()
    if suite == "optimum":
        from shimkit.audit.optimum_suite import names as optimum_names

        return optimum_names()
    return list(TRANSFORMERS_FAMILIES)


def is_suite_model(spec: str) -> bool:
    suite, slash, family = spec.partition("/")
    return bool(slash) and suite in SUITES and family in _families(suite)


def build(spec: str) -> Any:
    """``(model, example_inputs)`` for a suite MODEL argument such as ``transformers/bert`` (a program of several
    methods for some: ``metal/parakeet-tdt-bf16``, ``optimum/whisper-bf16``)."""
    import torch

    suite, _, family = spec.partition("/")
    if not _installed(suite):
        raise SuiteError(f"{spec}: needs {_LIBRARY[suite]}: {_INSTALL[suite]}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if suite == "metal":
            from shimkit.audit.metal_suite import build as build_metal

            return build_metal(family)
        if suite == "optimum":
            from shimkit.audit.optimum_suite import build as build_optimum

            return build_optimum(family)
        return _transformers_model(family)


def _transformers_model(family: str) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(family)
    for name, value in {**_SMALL, **_FAMILY.get(family, {})}.items():
        if hasattr(config, name):
            setattr(config, name, value)
    if hasattr(config, "text_config") or hasattr(config, "vision_config"):
        raise SuiteError(f"transformers/{family}: composite configs are not built by this suite")
    model = AutoModel.from_config(config).eval()
    generator = torch.Generator().manual_seed(0)
    main = model.main_input_name
    if main == "input_ids":
        inputs = {"input_ids": torch.randint(1, 128, (1, 8), generator=generator)}
    elif main == "pixel_values":
        channels = getattr(config, "num_channels", 3)
        inputs = {"pixel_values": torch.randn(1, channels, 32, 32, generator=generator)}
    elif main == "input_features":
        inputs = {"input_features": torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions,
                                                generator=generator)}
    elif main == "input_values":
        inputs = {"input_values": torch.randn(1, 1600, generator=generator)}
    else:
        raise SuiteError(f"transformers/{family}: no example input for {main!r}")
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = torch.randint(1, 128, (1, 4), generator=generator)
    return _returning_first_tensor(model, tuple(inputs)), tuple(inputs.values())


def _first_tensor(output: Any) -> Any:
    import torch

    if isinstance(output, torch.Tensor):
        return output
    values = output.to_tuple() if hasattr(output, "to_tuple") else tuple(output)
    return next(v for v in values if isinstance(v, torch.Tensor))


def _returning_first_tensor(model: Any, names: tuple[str, ...]) -> Any:
    """``model`` called with keyword inputs in ``names`` order (no KV cache), returning its first tensor."""
    import torch

    options = {"use_cache": False} if hasattr(model.config, "use_cache") else {}

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return _first_tensor(self.model(**dict(zip(names, inputs)), **options))

    return FirstOutput()
