"""torchao's 4-bit weight linear (``fpa4w``) on mps, provided by ExecuTorch's Metal runtime, and its ops
where torchao's own library is absent.

Upstream quantizes for Metal with torchao's ``quantize_(model, UIntxWeightOnlyConfig(group_size=32,
bitwidth=4))``, which packs the weights with ``torchao::_pack_weight_4bit`` (CPU) and runs
``torchao::_linear_fp_act_4bit_weight`` (MPS, and the c-shim of the same name in ExecuTorch's runtime).
torchao defines both only in its macOS library, ``libtorchao_ops_mps_aten.dylib``. Where no such library
exists, importing this plugin defines them with torchao's schemas, a fake kernel (torch.export) and a CPU
kernel, so that upstream's quantization call, export and eager runs work unchanged on Linux. An op
already defined, or a torchao library that would define it on load, is left alone.

The layout and numerics are torchao v0.18.0's (``torchao/experimental/``):

* codes: unsigned 4-bit, ``W[n, k]`` in ``[0, 16)``; packed along K two to a byte, the even ``k`` in the
  low nibble: ``B[n, j] = W[n, 2j + 1] << 4 | W[n, 2j]``, ``B`` of ``[N, K / 2]`` uint8
  (``kernels/mps/src/packing.h``, ``pack<4>``);
* scales ``S`` and zeros ``Z``: ``[N, ceil(K / group_size)]`` of the activation's dtype, row-major; the
  weight is ``S * W + Z``: zeros are added after scaling, as ``quant_api.py`` stores them
  (``-zero_point * scale``);
* ``int4pack_mm`` (``kernels/mps/metal/int4mm_opt.metal``) multiplies each code by its scale in float32,
  adds each group's zero times the float32 sum of the group's activations, accumulates in float32 and
  rounds once to the activation's dtype; its ``qmv`` kernels (M == 1) do the same sums with the scale
  applied per 16 codes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from shimkit.registry import OpPlugin, Shim, hookimpl

LINEAR_4BIT = "torchao::_linear_fp_act_4bit_weight.default"
SYMBOL = "aoti_torch_mps__linear_fp_act_4bit_weight"
GROUP_SIZES = (32, 64, 128, 256)
ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TORCHAO_MPS_LIBRARY = "libtorchao_ops_mps_aten.dylib"


def pack_weight_4bit(W: torch.Tensor) -> torch.Tensor:
    """``torchao::_pack_weight_4bit``: ``[N, K]`` uint8 codes to ``[N, K / 2]`` bytes, the even code in the
    low nibble. As in torchao, an odd last column is dropped and bits above a nibble are not masked."""
    _check_codes(W)
    pairs = W.size(1) // 2
    return (W[:, 1:2 * pairs:2] << 4) | W[:, 0:2 * pairs:2]


def linear_fp_act_4bit_weight(A: torch.Tensor, B: torch.Tensor, group_size: int, S: torch.Tensor,
                              Z: torch.Tensor) -> torch.Tensor:
    """``torchao::_linear_fp_act_4bit_weight``: ``A @ (S * codes(B) + Z)^T`` as torchao's Metal kernels
    compute it (module docstring)."""
    _check_linear(A, B, group_size, S, Z)
    m, k = A.shape
    groups = S.size(1)
    codes = torch.stack((B & 0x0F, B >> 4), dim=-1).flatten(1)
    scaled = codes.float() * S.float().repeat_interleave(group_size, dim=1)[:, :k]
    activations = A.float()
    group_sums = torch.nn.functional.pad(activations, (0, groups * group_size - k)).view(m, groups, group_size).sum(-1)
    return (activations @ scaled.t() + group_sums @ Z.float().t()).to(A.dtype)


def _pack_weight_4bit_fake(W: torch.Tensor) -> torch.Tensor:
    _check_codes(W)
    return W.new_empty((W.size(0), W.size(1) // 2))


def _linear_fp_act_4bit_weight_fake(A: torch.Tensor, B: torch.Tensor, group_size: int, S: torch.Tensor,
                                    Z: torch.Tensor) -> torch.Tensor:
    _check_linear(A, B, group_size, S, Z)
    return A.new_empty((A.size(0), B.size(0)))


def _check_codes(W: torch.Tensor) -> None:
    torch._check(W.dim() == 2 and W.dtype == torch.uint8,
                 lambda: f"_pack_weight_4bit: expect W to be a 2D uint8 tensor, got {W.dim()}D {W.dtype}")


def _check_linear(A: torch.Tensor, B: torch.Tensor, group_size: int, S: torch.Tensor, Z: torch.Tensor) -> None:
    """torchao's ``check_linear_mps_args`` (``ops/mps/linear_fp_act_xbit_weight_aten.mm``), and two checks
    it leaves to its kernels, which read ``S`` and ``Z`` as ``[N, ceil(K / group_size)]`` of ``A``'s dtype
    (ExecuTorch's runtime refuses other dtypes too)."""
    name = "_linear_fp_act_4bit_weight"
    torch._check(A.dtype in ACTIVATION_DTYPES, lambda: f"{name}: expect A to be a 32-bit or 16-bit float tensor, "
                                                       f"got {A.dtype}")
    torch._check(A.dim() == 2, lambda: f"{name}: expect A to be a 2D tensor, got {A.dim()}D")
    torch._check(A.is_contiguous(), lambda: f"{name}: expect A to be contiguous")
    torch._check(B.dim() == 2 and B.dtype == torch.uint8,
                 lambda: f"{name}: expect B to be a 2D uint8 tensor, got {B.dim()}D {B.dtype}")
    torch._check(B.is_contiguous(), lambda: f"{name}: expect B to be contiguous")
    m, k = A.shape
    n = B.size(0)
    torch._check(B.size(1) == k // 2, lambda: f"{name}: expect B.size(1) == {k // 2}, got {B.size(1)}")
    torch._check(k % 8 == 0, lambda: f"{name}: expect K to be a multiple of 8, got {k}")
    torch._check(n % 4 == 0 or m == 1, lambda: f"{name}: expect N to be a multiple of 4 when M != 1, got N={n} M={m}")
    torch._check(group_size in GROUP_SIZES, lambda: f"{name}: expect group_size to be 32, 64, 128 or 256, "
                                                    f"got {group_size}")
    groups = (k + group_size - 1) // group_size
    for label, params in (("S", S), ("Z", Z)):
        torch._check(params.dim() == 2 and params.size(0) == n and params.size(1) == groups,
                     lambda: f"{name}: expect {label} to be a 2D tensor of shape [{n}, {groups}], got "
                             f"{list(params.shape)}")
        torch._check(params.dtype == A.dtype, lambda: f"{name}: expect {label} to be {A.dtype} like A, got "
                                                      f"{params.dtype}")
        torch._check(params.is_contiguous(), lambda: f"{name}: expect {label} to be contiguous")


def torchao_mps_library_exists() -> bool:
    """Whether torchao's own library is where its loader (``torchao/experimental/ops/mps/utils.py``) looks:
    then importing ``torchao.experimental.ops.mps`` defines the ops, and defining them first would make that
    load fail. Found without importing torchao, which imports Inductor."""
    spec = importlib.util.find_spec("torchao")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    candidates = (package / TORCHAO_MPS_LIBRARY,
                  *package.parent.glob(f"build/lib.*/torchao/{TORCHAO_MPS_LIBRARY}"),
                  package / "experimental" / "ops" / "mps" / "cmake-out" / "lib" / TORCHAO_MPS_LIBRARY)
    return any(path.exists() for path in candidates)


def define_missing_ops() -> torch.library.Library | None:
    """Define those of the two ops that nothing defines, unless torchao's library can; the returned
    library holds the registrations (they last as long as it does)."""
    ops = {
        "_pack_weight_4bit": ("_pack_weight_4bit(Tensor W) -> Tensor", pack_weight_4bit, _pack_weight_4bit_fake),
        "_linear_fp_act_4bit_weight": (
            "_linear_fp_act_4bit_weight(Tensor A, Tensor B, int group_size, Tensor S, Tensor Z) -> Tensor",
            linear_fp_act_4bit_weight, _linear_fp_act_4bit_weight_fake),
    }
    missing = [name for name in ops if not hasattr(torch.ops.torchao, name)]
    if not missing or torchao_mps_library_exists():
        return None
    library = torch.library.Library("torchao", "FRAGMENT")
    for name in missing:
        schema, kernel, fake = ops[name]
        library.define(schema)
        library.impl(name, kernel, "CPU")
        torch.library.register_fake(f"torchao::{name}", fake, lib=library)
    return library


TORCHAO_OPS = define_missing_ops()


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="torchao-linear-4bit",
        ops=(LINEAR_4BIT,),
        shims=(Shim(
            op=LINEAR_4BIT, device="mps", symbol=SYMBOL,
            recorded_names=("torchao::_linear_fp_act_4bit_weight",),
            c_prototype=(f"AOTITorchError {SYMBOL}(AtenTensorHandle A, AtenTensorHandle B, "
                         "int64_t group_size, AtenTensorHandle S, AtenTensorHandle Z, "
                         "AtenTensorHandle* ret)"),
            provided_by_runtime=True),),
        doc="Linear with float activations and 4-bit grouped weights (torchao), from the Metal runtime.",
    )
