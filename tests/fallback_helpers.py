"""Calling the Linux Metal runtime's CPU fallback kernels (runtime/native/fallbacks/) by their C symbols, with
real AtenTensorHandles (libtorch's implementation of the AOTI C accessor API), for the
tests/test_metal_runtime_fallbacks*.py files.

The library is built once per source digest (an entry of the artifact store, ``shimkit.store``), with torch's
generated ``c_shim_mps.h`` and the custom ops' C prototypes (from the plugin records that declare them
to Inductor) force-included, so a symbol whose signature differs from what Inductor calls does not
compile. ``SHIMKIT_SANITIZE=1`` builds it with ASan and UBSan (run the process as csrc/sanitize.sh does).

Numbers are compared with the exact result (float64) of the same inputs: a float32 result may differ by
the float32 computation's own error bound, a bfloat16 or float16 one by that plus one rounding. NaN and
infinities must appear exactly where torch's own op puts them.
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import torch
from hypothesis import settings
from hypothesis import strategies as st

import shimkit.plugins.addmm as addmm_plugin
import shimkit.plugins.metal_custom_ops as metal_custom_ops
import shimkit.plugins.torchao_linear as torchao_linear
from shimkit.csrc.build import SANITIZER_FLAGS, compile_shared_library, sanitize_requested, sdk_sources
from shimkit.runtime.program import RUNTIME_DIR
from shimkit.store import default_store, digest_of
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS

FALLBACKS = RUNTIME_DIR / "fallbacks"
ADDMM_KERNEL = Path(addmm_plugin.KERNEL.directory)
H = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int32
F64 = ctypes.c_double
P = ctypes.POINTER

# Every symbol with its ctypes argument types (the C signatures, in order).
SIGNATURES = {
    "aoti_torch_mps_mm_out": [H, H, H],
    "aoti_torch_mps_bmm_out": [H, H, H],
    "aoti_torch_mps_addmm_out": [H, H, H, H, F64, F64],
    "aoti_torch_mps_topk": [H, I64, I64, I32, I32, P(H), P(H)],
    "aoti_torch_mps_convolution": [H, H, P(H), P(I64), I64, P(I64), I64, P(I64), I64, I32, P(I64), I64, I64, P(H)],
    "aoti_torch_mps__scaled_dot_product_attention_math_for_mps":
        [H, H, H, P(H), F64, I32, P(H), P(F64), P(H), P(H)],
    "aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2":
        [H, H, H, P(H), F64, I32, P(H), P(F64), I32, P(H), P(H)],
    "aoti_torch_mps__linear_fp_act_4bit_weight": [H, H, I64, H, H, P(H)],
    "aoti_torch_mps_gather_qmv": [H, H, H, H, H, I64, P(H)],
    "aoti_torch_mps_gated_delta_rule": [H, H, H, H, H, H, P(H)],
}
METAL_DTYPES = (torch.float32, torch.bfloat16)
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
U32 = UNIT_ROUNDOFF[torch.float32]
EXAMPLES = settings(max_examples=40, deadline=None)
FEW_EXAMPLES = settings(max_examples=20, deadline=None)


def custom_prototypes() -> list[str]:
    """The C prototypes shimkit gives Inductor for the runtime's custom ops."""
    records = [*torchao_linear.shimkit_op_plugins(), *metal_custom_ops.shimkit_op_plugins()]
    return [shim.c_prototype for record in records for shim in record.shims]


def prototype_header() -> Path:
    text = "#include <torch/csrc/inductor/aoti_torch/generated/c_shim_mps.h>\nextern \"C\" {\n"
    text += "".join(f"AOTI_TORCH_EXPORT {prototype};\n" for prototype in custom_prototypes())
    text += "}\n"
    store = default_store()

    def produce(staging: Path) -> None:
        (staging / "metal-fallback-prototypes.h").write_text(text)

    return store.build("test-sources", store.key("test-sources", [text]), produce) / "metal-fallback-prototypes.h"


UPSTREAM_ADDMM = FALLBACKS / "addmm.cpp"


@functools.lru_cache(maxsize=None)
def library(upstream_addmm: bool = False, replaced: tuple[tuple[str, str], ...] = ()) -> ctypes.CDLL:
    """The runtime's fallbacks over libtorch's AOTI API, with the addmm plugin's shim as shimkit's programs link
    it, or (``upstream_addmm``) the runtime's own stand-in of op_addmm.mm as stock programs link it; each source
    named first in a ``replaced`` pair compiled from the second instead (a mutant, tests/test_metal_runtime_mutants.py)."""
    import torch.utils.cpp_extension as cpp_extension

    plugin_addmm = [ADDMM_KERNEL / "addmm_plan.cpp", ADDMM_KERNEL / "addmm_reference.cpp",
                    Path(__file__).parent / "native" / "addmm_shim_host.cpp"]
    sources = [*(path for path in sorted(FALLBACKS.glob("*.cpp")) if upstream_addmm or path != UPSTREAM_ADDMM),
               *([] if upstream_addmm else plugin_addmm), *sdk_sources()]
    substitutes = dict(replaced)
    sources = [substitutes.get(str(path), str(path)) for path in sources]
    name = "shimkit_metal_fallbacks_upstream_addmm" if upstream_addmm else "shimkit_metal_fallbacks"
    if replaced:  # a library of its own name: the process may hold the real one already
        name += "_mutant_" + digest_of([Path(source).read_text() for _, source in replaced])[:12]
    flags = SANITIZER_FLAGS if sanitize_requested() else ("-O2",)
    path = compile_shared_library(
        name, sources,
        include_dirs=[*cpp_extension.include_paths(), str(ADDMM_KERNEL)],
        library_dirs=cpp_extension.library_paths(), libraries=["torch", "torch_cpu", "c10"],
        extra_flags=(*flags, "-include", str(prototype_header())))
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, I32
    lib.shimkit_metal_fallback_last_error.argtypes, lib.shimkit_metal_fallback_last_error.restype = [], ctypes.c_char_p
    return lib


def last_error(upstream_addmm: bool = False) -> str:
    return library(upstream_addmm).shimkit_metal_fallback_last_error().decode()


def steal(handle: H) -> torch.Tensor:
    """The tensor a fallback allocated, owned by Python from now on."""
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.argtypes, new_capsule.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object
    (tensor,) = torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs([new_capsule(handle.value, None, None)])
    return tensor


def int_array(values) -> ctypes.Array:
    values = list(values)
    return (I64 * max(len(values), 1))(*values)


def optional(handle: int | None):
    """An ``AtenTensorHandle*`` argument: a pointer to the handle (to a null handle for None)."""
    return ctypes.byref(H(handle))


def call(name: str, *args, upstream_addmm: bool = False) -> int:
    return getattr(library(upstream_addmm), name)(*args)


def assert_fails(status: int, *words: str, upstream_addmm: bool = False) -> None:
    message = last_error(upstream_addmm)
    assert status != AOTI_TORCH_SUCCESS, "the call succeeded"
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def assert_rounded_once(result: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor | float,
                        pattern: torch.Tensor | None = None, what: str = "result") -> None:
    """``result`` is ``exact`` (float64) up to ``bound`` (the float32 computation's error) and one
    rounding to its dtype; NaN and infinities where ``pattern`` (torch's own result) has them."""
    got = result.double()
    assert got.shape == exact.shape, f"{what}: shape {tuple(got.shape)} != {tuple(exact.shape)}"
    pattern = exact if pattern is None else pattern.double()
    nan = pattern.isnan()
    assert torch.equal(got.isnan(), nan), f"{what}: NaN at {got.isnan().nonzero().tolist()}, torch at {nan.nonzero().tolist()}"
    inf = pattern.isinf()
    assert torch.equal(got[inf], pattern[inf]), f"{what}: infinities {got[inf]} != torch's {pattern[inf]}"
    finite = ~nan & ~inf
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(exact)
    unit = UNIT_ROUNDOFF[result.dtype]
    # One rounding: relative to the value, or half the subnormal spacing below the normal range.
    allowed = bound + unit * (exact.abs() + bound) + unit * torch.finfo(result.dtype).smallest_normal
    diff = (got - exact).abs()
    bad = finite & ~(diff <= allowed)
    assert not bad.any(), (f"{what}: off by {diff[bad].tolist()[:4]} where {allowed[bad].tolist()[:4]} is allowed "
                           f"(got {got[bad].tolist()[:4]}, exact {exact[bad].tolist()[:4]})")


def random(shape, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(dtype)


def strided(tensor: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in another layout: 'contiguous', 'transposed' (last two dims swapped in memory),
    'sliced' (every other element of a NaN- or max-filled buffer, at an offset) or 'permuted' (dims reversed in memory)."""
    if how == "transposed" and tensor.dim() >= 2:
        return tensor.mT.contiguous().mT
    if how == "permuted" and tensor.dim() >= 2:
        order = list(range(tensor.dim()))[::-1]
        return tensor.permute(order).contiguous().permute(order)
    if how == "sliced" and tensor.dim() >= 1:
        filler = math.nan if tensor.dtype.is_floating_point else torch.iinfo(tensor.dtype).max
        buffer = torch.full((*tensor.shape[:-1], 2 * tensor.shape[-1] + 1), filler, dtype=tensor.dtype)
        view = buffer[..., 1::2]
        view.copy_(tensor)
        return view
    return tensor.contiguous()


def read_densely(tensor: torch.Tensor, shape=None) -> torch.Tensor:
    """``tensor``'s memory from its data pointer as a contiguous buffer of ``shape`` (its own by default): what an
    upstream op that uses only ``sizes()`` reads (op_convolution.mm, op_addmm.mm)."""
    shape = tuple(tensor.shape if shape is None else shape)
    return tensor.as_strided(shape, torch.empty(shape).stride(), tensor.storage_offset())


LAYOUTS = st.sampled_from(["contiguous", "transposed", "sliced", "permuted"])
SEEDS = st.integers(0, 2 ** 31 - 1)


def values(specials: bool):
    """Finite floats, and with ``specials`` NaN, infinities and -0.0 too."""
    finite = st.floats(-4, 4, width=32)
    return (finite | st.sampled_from((math.nan, math.inf, -math.inf, -0.0))) if specials else finite


def product_exact(a: torch.Tensor, b: torch.Tensor):
    """(a @ b, |a| @ |b|) in float64 from elementwise products, so NaN and inf follow IEEE exactly."""
    a, b = a.double(), b.double()
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2), (a.abs().unsqueeze(-1) * b.abs().unsqueeze(-3)).sum(-2)
