"""Public Metal kernels from mlx-lm (Apple's MLX language-model package, https://github.com/ml-explore/mlx-lm,
release 0.32.2 from PyPI, pinned in requirements-kernels.txt), run unchanged through shimkit.metal and checked
against mlx-lm's own ops-based reference implementations, evaluated by MLX on the CPU.

The kernels are read from the installed package at test time (nothing of mlx-lm is copied here). mlx-lm
builds them with ``mx.fast.metal_kernel`` when its modules are imported, and only if ``mx.metal.is_available()``;
:func:`mlx_lm_on_shimkit_metal` imports the modules with both answered by shimkit (MLX's calling convention,
``shimkit.metal.metal_kernel``), without running ``mlx_lm/__init__.py`` (it would import transformers), and
restores MLX and ``sys.modules`` afterwards.

| module (mlx-lm 0.32.2) | kernel | reference it is checked against |
| --- | --- | --- |
| `models/gated_delta.py` | `gated_delta_kernel` (Qwen3-Next's gated delta rule: scalar and vector gates, masks, the packed Dk=128 variant) | `gated_delta_ops` |
| `models/ssm.py` | `ssm_update_kernel` (Mamba-2 single-step state update) | `ssm_attn`, the path `ssm_update` takes without Metal |
| `models/rwkv7.py` | `wkv7_kernel` (RWKV-7 recurrence) | `_wkv7_step_ops`, step by step, as `_wkv7` does without Metal |
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest

from shimkit.metal import metal_kernel

# MLX and mlx-lm are test dependencies here (requirements-kernels.txt); the GPU machine has neither.
mx = pytest.importorskip("mlx.core")
if importlib.util.find_spec("mlx_lm") is None:  # found, not imported: its __init__ would import transformers
    pytest.skip("mlx-lm is not installed", allow_module_level=True)

MODULES = ("mlx_lm.models.gated_delta", "mlx_lm.models.ssm", "mlx_lm.models.rwkv7")


@contextlib.contextmanager
def mlx_lm_on_shimkit_metal():
    """mlx-lm's kernel modules, imported with their Metal kernels built by shimkit.metal."""
    spec = importlib.util.find_spec("mlx_lm")
    assert spec is not None and spec.submodule_search_locations, "./dev setup installs mlx-lm (requirements-kernels.txt)"
    saved_modules = {name: module for name, module in sys.modules.items()
                     if name == "mlx_lm" or name.startswith("mlx_lm.")}
    saved_mlx = (mx.fast.metal_kernel, mx.metal.is_available)
    package = types.ModuleType("mlx_lm")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["mlx_lm"] = package
    mx.fast.metal_kernel, mx.metal.is_available = metal_kernel, (lambda: True)
    try:
        modules = {name.rsplit(".", 1)[1]: importlib.import_module(name) for name in MODULES}
    finally:
        mx.fast.metal_kernel, mx.metal.is_available = saved_mlx
        for name in [n for n in sys.modules if n == "mlx_lm" or n.startswith("mlx_lm.")]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
    yield types.SimpleNamespace(**modules)


@pytest.fixture(scope="module")
def mlx_lm():
    with mlx_lm_on_shimkit_metal() as modules:
        yield modules


def normal(key, shape, scale=1.0, dtype=None):
    values = mx.random.normal(shape, key=key) * scale
    return values if dtype is None else values.astype(dtype)


def close(actual, expected, tolerance):
    actual = np.array(actual.astype(mx.float32))
    expected = np.array(expected.astype(mx.float32))
    assert actual.shape == expected.shape
    error = np.abs(actual - expected).max() if actual.size else 0.0
    assert error <= tolerance, f"max error {error} > {tolerance}"


def test_the_kernels_are_shimkits(mlx_lm):
    assert type(mlx_lm.gated_delta._gated_delta_kernel).__module__ == "shimkit.metal.mlx"
    assert "mlx_lm" not in sys.modules or sys.modules["mlx_lm"].__name__ == "mlx_lm"
    assert mx.fast.metal_kernel is not metal_kernel  # MLX is restored


@pytest.mark.parametrize("gating", ["scalar", "vector", "masked", "packed"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gated_delta_kernel_matches_mlx_lms_ops_reference(mlx_lm, gating, dtype):
    B, T, Hk, Hv = 2, 4, 1, 2
    Dk, Dv = (128, 8) if gating == "packed" else (64, 16)
    keys = mx.random.split(mx.random.key(11), 8)
    input_dtype = getattr(mx, dtype)
    q = normal(keys[0], (B, T, Hk, Dk), 0.2, input_dtype)
    k = normal(keys[1], (B, T, Hk, Dk), 0.2, input_dtype)
    v = normal(keys[2], (B, T, Hv, Dv), 1.0, input_dtype)
    gate_shape = (B, T, Hv, Dk) if gating == "vector" else (B, T, Hv)
    g = mx.exp(-mx.random.uniform(shape=gate_shape, key=keys[3]))
    if gating != "packed":
        g = g.astype(input_dtype)
    beta = mx.sigmoid(normal(keys[4], (B, T, Hv))).astype(input_dtype)
    state = normal(keys[5], (B, Hv, Dv, Dk), 0.1)
    mask = (mx.random.uniform(shape=(B, T), key=keys[6]) > 0.3) if gating == "masked" else None
    y, new_state = mlx_lm.gated_delta.gated_delta_kernel(q, k, v, g, beta, state, mask)
    expected_y, expected_state = mlx_lm.gated_delta.gated_delta_ops(q, k, v, g, beta, state, mask)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    if gating != "masked":  # the kernel writes 0 where the mask is off; the reference keeps the state
        close(y, expected_y, tolerance)
    else:
        keep = np.array(mask)[:, :, None, None]
        close(mx.array(np.array(y.astype(mx.float32)) * keep), mx.array(np.array(
            expected_y.astype(mx.float32)) * keep), tolerance)
    close(new_state, expected_state, tolerance)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_ssm_update_kernel_matches_mlx_lms_ops_path(mlx_lm, dtype):
    batch, heads, head_dim, groups, state_dim = 2, 4, 8, 2, 64
    keys = mx.random.split(mx.random.key(5), 8)
    input_dtype = getattr(mx, dtype)
    x = normal(keys[0], (batch, 1, heads, head_dim), 1.0, input_dtype)
    A_log = normal(keys[1], (heads,), 0.5)
    B = normal(keys[2], (batch, 1, groups, state_dim), 1.0, input_dtype)
    C = normal(keys[3], (batch, 1, groups, state_dim), 1.0, input_dtype)
    D = normal(keys[4], (heads,))
    dt = normal(keys[5], (batch, 1, heads), 1.0, input_dtype)
    dt_bias = normal(keys[6], (heads,), 0.1)
    state = normal(keys[7], (batch, heads, head_dim, state_dim), 0.5)
    limits = (0.001, 100.0)
    y, new_state = mlx_lm.ssm.ssm_update_kernel(x, A_log, B, C, D, dt, dt_bias, state, limits)
    expected_y, expected_state = mlx_lm.ssm.ssm_attn(x, A_log, B, C, D, dt, dt_bias, state, limits)
    close(y, expected_y, 1e-4 if dtype == "float32" else 2e-2)
    close(new_state, expected_state, 1e-4)


def test_wkv7_kernel_matches_mlx_lms_step_by_step_ops(mlx_lm):
    B, T, H, D = 2, 3, 2, 64
    keys = mx.random.split(mx.random.key(3), 8)
    r, k, v = (normal(keys[i], (B, T, H, D), 0.5) for i in range(3))
    w = mx.exp(-mx.exp(normal(keys[3], (B, T, H, D), 0.5)))
    kk = mlx_lm.rwkv7.l2_norm(normal(keys[4], (B, T, H, D)))
    a, b = -kk, kk * mx.sigmoid(normal(keys[5], (B, T, H, D)))
    state = normal(keys[6], (B, H, D, D), 0.1)
    y, new_state = mlx_lm.rwkv7.wkv7_kernel(r, w, k, v, a, b, state)
    expected_state, ys = state, []
    for t in range(T):
        step_y, expected_state = mlx_lm.rwkv7._wkv7_step_ops(r[:, t], w[:, t], k[:, t], v[:, t], a[:, t], b[:, t],
                                                             expected_state)
        ys.append(step_y)
    close(y, mx.stack(ys, axis=1).reshape(y.shape), 1e-4)
    close(new_state, expected_state, 1e-4)
