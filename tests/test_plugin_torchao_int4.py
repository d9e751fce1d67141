"""int4 (``fpa4w``) on Linux: upstream's own torchao quantization call, export and a whole Metal program,
through the ops the torchao-linear plugin defines where torchao's macOS library is absent.

Results are checked against torchao's dequantize-then-matmul in float64, written here from torchao's
documented layout (``kernels/mps/src/packing.h``: two codes a byte, the even ``k`` in the low nibble;
``experimental/quant_api.py``: weight = scale * code + zero, per group of K) and not from the plugin's
kernel. A float32 result may differ from it by float32 accumulation's error bound, a bfloat16 one by that
plus one rounding (and one more where the model adds a bias in bfloat16).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shimkit.plugins.torchao_linear as torchao_linear
from torchao.experimental.quant_api import UIntxWeightOnlyConfig, _quantize
from torchao.quantization.quant_api import quantize_

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))
GROUP_SIZES = (32, 64, 128, 256)  # all UIntxWeightOnlyConfig accepts
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
U32 = UNIT_ROUNDOFF[torch.float32]
LINEAR_4BIT = torch.ops.torchao._linear_fp_act_4bit_weight.default


def codes_of(packed: torch.Tensor) -> torch.Tensor:
    """The 4-bit codes of ``[N, K / 2]`` bytes, byte ``j`` holding ``k = 2j`` below ``k = 2j + 1``."""
    byte = packed.to(torch.int64)
    return torch.stack((byte % 16, byte // 16), dim=-1).reshape(packed.size(0), -1)


def dequantized(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    group = torch.arange(codes.size(1)) // group_size
    return scales.double()[:, group] * codes.double() + zeros.double()[:, group]


def linear_exact(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                 group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x @ weight^T`` in float64, and float32 accumulation's error bound for it (``k + 8`` roundings of
    the scaled codes', the zeros' and the group sums' magnitudes)."""
    group = torch.arange(codes.size(1)) // group_size
    magnitude = (scales.double()[:, group] * codes.double()).abs() + zeros.double()[:, group].abs()
    exact = x.double() @ dequantized(codes, scales, zeros, group_size).t()
    return exact, (codes.size(1) + 8) * U32 * (x.double().abs() @ magnitude.t())


def assert_within(result: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> None:
    excess = (result.double() - exact).abs() - bound
    assert bool((excess <= 0).all()), f"error exceeds its bound by up to {excess.max():.3g}"


def quantized_linear(k: int, n: int, group_size: int, dtype: torch.dtype) -> torch.nn.Sequential:
    """Upstream's fpa4w call (backends/apple/metal/tests/test_modules.py), on a model already in ``dtype``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n)).to(dtype)
    quantize_(model, UIntxWeightOnlyConfig(group_size=group_size, bitwidth=4))
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group_size", GROUP_SIZES)
def test_upstreams_quantization_matches_dequantize_then_matmul(group_size, dtype):
    torch.manual_seed(1)
    weight = torch.randn(8, 2 * group_size).to(dtype)
    model = torch.nn.Sequential(torch.nn.Linear(2 * group_size, 8)).to(dtype)
    model[0].weight.data.copy_(weight)
    quantize_(model, UIntxWeightOnlyConfig(group_size=group_size, bitwidth=4))
    layer = model[0]
    assert layer.packed_weights.dtype == torch.uint8 and layer.packed_weights.shape == (8, group_size)
    assert layer.weight_scales.dtype == dtype and layer.weight_scales.shape == (8, 2)

    # the bytes hold the codes torchao's quantizer chose, in torchao's nibble order
    expected, _, _ = _quantize(weight, group_size, 4, has_weight_zeros=True, signed=False)
    codes = codes_of(layer.packed_weights)
    assert torch.equal(codes, expected.to(torch.int64))

    x = torch.randn(3, 2 * group_size).to(dtype)
    linear, bound = linear_exact(x, codes, layer.weight_scales, layer.weight_zeros, group_size)
    exact = linear + layer.bias.double()
    u = UNIT_ROUNDOFF[dtype]
    first = (1 + u) * bound + u * linear.abs()  # the op's one rounding, then the bias' in the model's dtype
    result = model(x)
    assert result.dtype == dtype and result.shape == (3, 8)
    assert_within(result, exact, (1 + u) * first + u * exact.abs())


def test_the_nibble_order_is_torchaos():
    # packing.h pack<4>: b = (w[2j + 1] << 4) | w[2j]
    codes = torch.tensor([[1, 2, 3, 4], [15, 0, 0, 15]], dtype=torch.uint8)
    packed = torch.ops.torchao._pack_weight_4bit(codes)
    assert torch.equal(packed, torch.tensor([[0x21, 0x43], [0x0F, 0xF0]], dtype=torch.uint8))


def test_export_keeps_the_torchao_op_with_a_dynamic_batch():
    model = quantized_linear(64, 8, 32, torch.float32)
    x = torch.randn(5, 64)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("m", min=2, max=64)},))
    targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert LINEAR_4BIT in targets
    for rows in (2, 5, 17):
        batch = torch.randn(rows, 64)
        assert torch.equal(program.module()(batch), model(batch))


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(dtype=st.sampled_from((torch.float32, torch.bfloat16, torch.float16)), m=st.integers(0, 5),
       quads=st.integers(1, 3), group_size=st.sampled_from(GROUP_SIZES), groups=st.integers(1, 3),
       partial=st.booleans(), seed=st.integers(0, 2 ** 31 - 1))
def test_the_cpu_kernel_is_dequantize_then_matmul_rounded_once(dtype, m, quads, group_size, groups, partial, seed):
    # N % 4 == 0 unless M == 1; a partial last group (K a multiple of 8 only) is read as torchao's kernels do
    n = 4 * quads - (1 if m == 1 else 0)
    k = group_size * groups - (8 if partial else 0)
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=generator, dtype=torch.uint8)
    scales = (torch.rand(n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
    zeros = (torch.randn(n, groups, generator=generator, dtype=torch.float64) * 0.5).to(dtype)
    x = torch.randn(m, k, generator=generator, dtype=torch.float64).to(dtype)
    result = LINEAR_4BIT(x, torch.ops.torchao._pack_weight_4bit(codes), group_size, scales, zeros)
    assert result.dtype == dtype and result.shape == (m, n)
    exact, bound = linear_exact(x, codes.to(torch.int64), scales, zeros, group_size)
    u = UNIT_ROUNDOFF[dtype]
    assert_within(result, exact, (1 + u) * bound + u * exact.abs())


@pytest.mark.parametrize("case, message", [
    ("group_size", "expect group_size to be 32, 64, 128 or 256, got 48"),
    ("n4", "expect N to be a multiple of 4 when M != 1, got N=6 M=2"),
    ("k8", "expect K to be a multiple of 8, got 68"),
    ("scales_dtype", "expect S to be torch.bfloat16 like A, got torch.float32"),
    ("zeros_groups", "expect Z to be a 2D tensor of shape [8, 2]"),
])
def test_the_op_refuses_what_torchao_refuses(case, message):
    a, b = torch.ones(2, 64), torch.zeros(8, 32, dtype=torch.uint8)
    group_size, s, z = 32, torch.ones(8, 2), torch.zeros(8, 2)
    if case == "group_size":
        group_size = 48
    elif case == "n4":
        b, s, z = b[:6], s[:6], z[:6]
    elif case == "k8":
        a, b, s, z = torch.ones(2, 68), torch.zeros(8, 34, dtype=torch.uint8), torch.ones(8, 3), torch.zeros(8, 3)
    elif case == "scales_dtype":
        a, z = a.bfloat16(), z.bfloat16()
    elif case == "zeros_groups":
        z = torch.zeros(8, 3)
    with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        LINEAR_4BIT(a, b, group_size, s, z)


def test_ops_already_defined_are_left_alone():
    assert torchao_linear.define_missing_ops() is None


def test_torchaos_own_library_is_found_where_torchao_looks(tmp_path, monkeypatch):
    package = tmp_path / "torchao"
    package.mkdir()
    spec = types.SimpleNamespace(submodule_search_locations=[str(package)])
    monkeypatch.setattr(torchao_linear.importlib.util, "find_spec", lambda name: spec if name == "torchao" else None)
    assert not torchao_linear.torchao_mps_library_exists()
    (package / torchao_linear.TORCHAO_MPS_LIBRARY).touch()
    assert torchao_linear.torchao_mps_library_exists()


MODEL = textwrap.dedent("""
    import torch
    from torchao.experimental.quant_api import UIntxWeightOnlyConfig
    from torchao.quantization.quant_api import quantize_


    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 8)).to(torch.{dtype})
        quantize_(model, UIntxWeightOnlyConfig(group_size=32, bitwidth=4))
        return model, (torch.randn(3, 64).to(torch.{dtype}),)
""")


@pytest.fixture(scope="module")
def build_store(tmp_path_factory):
    """One artifact store for both dtypes, so the stand-in runtime is compiled once (about 40 s), not per test."""
    return tmp_path_factory.mktemp("build-store")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_quantized_model_executes_clean_as_a_whole_metal_program(tmp_path, build_store, dtype):
    (tmp_path / "int4.py").write_text(MODEL.format(dtype=dtype))
    done = subprocess.run([SHIMKIT, "audit", "--execute", "--json", "--quiet", "--no-cache", f"{tmp_path}/int4.py:make"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SHIMKIT_BUILD_DIR": str(build_store)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (model,) = json.loads(done.stdout)["models"]
    assert model["status"] == "clean"
    assert [kernel["provider"]["plugin"] for kernel in model["kernels"]] == ["torchao-linear-4bit"]
    assert model["numerics"]["ran"] == "program" and model["numerics"]["ok"]
