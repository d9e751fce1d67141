"""Mutants of the stand-in runtime (issue 66, part 6): the faithfulness itself is tested, not only its output.

Each row of docs/metal.md's table "The stand-in and upstream" that a program can reach has a mutant here: the
stand-in's source edited back to ATen's behaviour, as a reviewer "fixing" it would edit it (the divergence computed
as ATen computes it, and no longer noted). A stock program that meets the row must be WRONG on the real stand-in and
comes out CLEAN on the mutant, so a stand-in that drifted back towards ATen would be seen by this suite. Each mutant
also fails loudly once its source no longer holds the text it edits (the row changed: the mutant must follow it).

A mutated runtime is built from the real one with only the edited unit replaced (its objects and every other unit
are the real runtime's, from the artifact store), under a library name of its own.

Rows no program reaches through Inductor (a convolution's bias: Inductor peels it off; the int4 and MoE kernels,
which stock cannot export) are mutated in the fallbacks' own library (tests/fallback_helpers.py): there the row's
test in tests/test_metal_runtime_fallbacks*.py, or the shims' in tests/test_metal_runtime_shims.py, must fail on
the mutant; each passes on the real stand-in where it runs in the suite. gather_qmv's and the gated delta rule's
dense reads have no mutant: those stand-ins index every operand densely by construction (an ATen reading would be a
rewrite, not an edit); their tests compare them with the dense reading of every layout.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
import torch

import fallback_helpers
import test_metal_runtime_fallbacks as mm_tests
import test_metal_runtime_fallbacks_conv_sdpa as conv_sdpa_tests
import test_metal_runtime_fallbacks_quantized as quantized_tests
import test_metal_runtime_shims as shims_tests
from test_metal_upstream_runtime import CONVOLUTIONS, TRANSPOSED_SELF

import shimkit.runtime.program as program
from shimkit.audit.loader import load_model
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import get_registry
from shimkit.runtime.sources import RUNTIME_DIR
from shimkit.store import digest_of


@dataclasses.dataclass(frozen=True)
class Mutant:
    """``unit`` (relative to runtime/native) with each ``(upstream's behaviour, ATen's)`` text replaced."""

    unit: str
    edits: tuple[tuple[str, str], ...]

    def source(self) -> str:
        text = (RUNTIME_DIR / self.unit).read_text()
        for faithful, aten in self.edits:
            assert text.count(faithful) == 1, f"{self.unit} no longer holds {faithful!r}: update this mutant"
            text = text.replace(faithful, aten)
        # The copy lives elsewhere: the header beside the real unit is included by its path.
        return text.replace('#include "fallback_common.h"', f'#include "{RUNTIME_DIR / "fallbacks"}/fallback_common.h"')

    def write(self, folder: Path) -> Path:
        copy = folder / f"mutant_{Path(self.unit).name}"
        copy.write_text(self.source())
        return copy


@pytest.fixture
def mutated_runtime(monkeypatch, tmp_path):
    """``use(mutant)`` makes every program built from then on link a runtime with ``mutant``'s unit in place of the
    real one (a library of its own name); undone, and the runtime caches emptied, at the end of the test."""
    sources = program.runtime_sources

    def use(mutant: Mutant) -> None:
        original = str(RUNTIME_DIR / mutant.unit)
        copy = mutant.write(tmp_path)
        fingerprint = digest_of([program.runtime_fingerprint(), copy.read_text()])
        program._runtime_library.cache_clear()
        monkeypatch.setattr(program, "runtime_sources",
                            lambda *args: [str(copy) if s == original else s for s in sources(*args)])
        monkeypatch.setattr(program, "runtime_fingerprint", lambda: fingerprint)

    yield use
    program._runtime_library.cache_clear()


def _write_model(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n" + textwrap.dedent(body))
    return f"{path}:make"


def _stock(spec: str):
    return audit_loaded(load_model(spec), config=None, options=AuditOptions(numerics="execute"))


@dataclasses.dataclass(frozen=True)
class Row:
    """A row of the table: a stock model that meets it, the cause its verdict names, and the stand-in's mutant."""

    model: str
    cause: str
    mutant: Mutant


ROWS = {
    "convolution reads its operands through sizes()": Row(
        CONVOLUTIONS,
        "aoti_torch_mps_convolution reads its channels-last input as a contiguous NCHW buffer",
        Mutant("fallbacks/convolution.cpp", (
            ("input, contiguous_strides(input.view.sizes)", "input, input.view.strides"),
            ("weight, contiguous_strides(weight.view.sizes)", "weight, weight.view.strides")))),
    "mm reads self through sizes()": Row(
        TRANSPOSED_SELF,
        "aoti_torch_mps_mm_out reads its strided self as a dense [M, K] buffer",
        Mutant("fallbacks/mm.cpp", (("self, {k, 1},", "self, self.view.strides,"),))),
    "SDPA aligns is_causal bottom-right": Row(
        """
        class CausalWithCache(torch.nn.Module):
            def forward(self, q, k, v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def make():
            torch.manual_seed(0)
            return CausalWithCache(), (torch.randn(1, 2, 3, 64), torch.randn(1, 2, 7, 64), torch.randn(1, 2, 7, 64))
        """,
        "aligns is_causal bottom-right",
        Mutant("fallbacks/sdpa.cpp", (
            ("static_cast<uint32_t>(kv_length) - static_cast<uint32_t>(q_length);  // wraps as uint", "0;"),
            ("if (is_causal && q_length != kv_length && q_length > 0) {", "if (false) {")))),
    "SDPA addresses the mask with batch and heads flattened": Row(
        """
        class PerBatchMask(torch.nn.Module):
            def forward(self, q, k, v, mask):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        def make():
            torch.manual_seed(0)
            q, k, v = torch.randn(2, 3, 4, 64), torch.randn(2, 3, 6, 64), torch.randn(2, 3, 6, 64)
            return PerBatchMask(), (q, k, v, torch.randn(2, 1, 4, 6))
        """,
        "addresses attn_mask with batch and heads flattened into one index",
        Mutant("fallbacks/sdpa.cpp", (
            ("const int64_t mask_base = addressing.base(b * heads + h, i);",
             "const int64_t mask_base = (mask.dim() == 4 && mask.size(0) > 1 ? b * mask.stride(0) : 0) + "
             "(mask.dim() >= 3 && mask.size(mask.dim() - 3) > 1 ? h * mask.stride(mask.dim() - 3) : 0) + "
             "i * addressing.q_seq;"),
            ("if (upstream.base(b * heads, 0) != aten) {", "if (false && upstream.base(b * heads, 0) != aten) {")))),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_the_stand_in_reverted_to_aten_turns_a_wrong_verdict_clean(row, tmp_path, mutated_runtime):
    case = ROWS[row]
    spec = _write_model(tmp_path, case.model)
    stock = _stock(spec)
    assert stock.status == "wrong", (stock.status, stock.numerics and stock.numerics.checks)
    assert case.cause in stock.numerics.checks[0].error
    mutated_runtime(case.mutant)
    mutant = _stock(spec)
    assert mutant.status == "clean", (row, mutant.numerics and mutant.numerics.checks)


def test_the_runtime_reverted_to_the_callers_strides_turns_a_wrong_verdict_clean(tmp_path, monkeypatch):
    """``MetalBackend::execute``'s row lives in Python (runtime/program.py): its mutant hands the program the
    caller's channels-last input as it is."""
    spec = _write_model(tmp_path, """
        def make():
            torch.manual_seed(0)
            return torch.nn.Conv2d(3, 8, 3, padding=1), (torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last),)
    """)
    config = get_registry().backend_config("mps")
    options = AuditOptions(numerics="execute")
    assert audit_loaded(load_model(spec), config=config, options=options).status == "wrong"
    monkeypatch.setattr(program, "_as_execute_copies", lambda inputs: [i.detach() for i in inputs])
    monkeypatch.setattr(program, "_inputs_made_contiguous", lambda inputs: [])
    assert audit_loaded(load_model(spec), config=config, options=options).status == "clean"


@pytest.fixture
def mutated_fallbacks(monkeypatch, tmp_path):
    """``use(mutant)`` makes the fallbacks' library (``fallback_helpers.library``, which the fallback tests call
    through) the one with ``mutant``'s unit in place of the real one, until the end of the test."""
    real = fallback_helpers.library

    def use(mutant: Mutant) -> None:
        replaced = ((str(RUNTIME_DIR / mutant.unit), str(mutant.write(tmp_path))),)
        monkeypatch.setattr(fallback_helpers, "library",
                            lambda upstream_addmm=False: real(upstream_addmm, replaced))

    return use


_STRIDED_COPY = """{
      const size_t bytes = element_size(to.dtype);
      std::vector<int64_t> index(to.sizes.size(), 0);
      for (int64_t e = 0; e < numel; ++e) {
        int64_t offset = 0;
        for (size_t d = 0; d < index.size(); ++d) offset += index[d] * to.strides[d];
        std::memcpy(static_cast<char*>(to.tensor->mutable_data_ptr()) + offset * bytes,
                    static_cast<const char*>(from.tensor->const_data_ptr()) + offset * bytes, bytes);
        for (size_t d = index.size(); d-- > 0;) {
          if (++index[d] < to.sizes[d]) break;
          index[d] = 0;
        }
      }
    }"""

# A row's mutant, and the test of the fallbacks that must fail on it.
FALLBACK_ROWS = {
    "convolution adds the bias along the last dimension": (
        Mutant("fallbacks/convolution.cpp", (
            ("if (has_bias && out_channels != 1) {", "if (false) {"),
            ("y[e] = rounded(input, rounded(input, y[e]) + b[static_cast<std::size_t>(out_channels == 1 ? 0 : ow)]);",
             "y[e] += b[static_cast<std::size_t>(static_cast<int64_t>(e) / geometry.out_plane() % out_channels)];"))),
        conv_sdpa_tests.test_convolution_adds_the_bias_along_the_last_dimension_as_op_convolution_mm),
    "SDPA skips keys masked at <= -1e9": (
        Mutant("fallbacks/sdpa.cpp", (("bool valid = !has_mask || mask_value > -1e9f;", "bool valid = true;"),)),
        conv_sdpa_tests.test_sdpa_skips_masked_keys_and_gives_nan_where_no_key_is_left_as_op_sdpa_mm_does),
    "addmm reads mat1 through sizes()": (
        Mutant("fallbacks/addmm.cpp", (("mat1, {k, 1},", "mat1, mat1.view.strides,"),)),
        mm_tests.test_the_runtimes_own_addmm_computes_what_op_addmm_mm_computes),
    "the 4-bit linear rounds its dequantized tile for M > 1": (
        Mutant("fallbacks/linear_4bit.cpp", (
            ("tiled ? rounded(a, rounded(a, scaled) + z.load(g)) : scaled + z.load(g)", "scaled + z.load(g)"),)),
        quantized_tests.test_linear_4bit_matches_its_dequantized_product),
}


def _assert_failed(error: BaseException) -> None:
    """A test's own assertion failed (hypothesis may group several falsifying examples), not a build or a crash."""
    leaves = error.exceptions if isinstance(error, BaseExceptionGroup) else (error,)
    assert all(isinstance(leaf, AssertionError) for leaf in leaves), error


@pytest.mark.parametrize("row", list(FALLBACK_ROWS))
def test_the_fallbacks_tests_fail_on_the_stand_in_reverted_to_aten(row, mutated_fallbacks):
    mutant, witness = FALLBACK_ROWS[row]
    mutated_fallbacks(mutant)
    with pytest.raises(BaseException) as caught:
        witness()
    _assert_failed(caught.value)


SHIM_ROWS = {
    "empty_strided leaves its memory unwritten": (
        Mutant("tensors.cpp", (("std::memset(storage->data, kUnwrittenByte, bytes);",
                                "std::memset(storage->data, 0, bytes);"),)),
        shims_tests.test_empty_strided_leaves_its_memory_unwritten_as_upstream_does),
    "copy_ copies numel elements' bytes whatever the strides": (
        Mutant("tensors.cpp", (("if (span > numel) {", "if (false) {"),
                               ("std::memmove(to.tensor->mutable_data_ptr(), from.tensor->const_data_ptr(),\n"
                                "                 static_cast<size_t>(numel) * element_size(to.dtype));",
                                _STRIDED_COPY))),
        shims_tests.test_copy_of_a_layout_with_holes_copies_numel_bytes_from_the_data_pointer),
}


@pytest.mark.parametrize("row", list(SHIM_ROWS))
def test_the_shims_tests_fail_on_the_runtime_reverted_to_aten(row, mutated_runtime):
    mutant, witness = SHIM_ROWS[row]
    mutated_runtime(mutant)
    runtime = program.load_runtime(program.runtime_library(None))
    with pytest.raises(AssertionError):
        witness(runtime)
