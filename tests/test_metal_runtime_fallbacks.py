"""The Linux Metal runtime's CPU fallback kernels (csrc/metal_runtime/fallbacks/), called by their C
symbols with real AtenTensorHandles (libtorch's implementation of the AOTI C accessor API), against torch.

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

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shimkit.plugins.addmm as addmm_plugin
import shimkit.plugins.metal_custom_ops as metal_custom_ops
import shimkit.plugins.torchao_linear as torchao_linear
from shimkit.csrc.build import SANITIZER_FLAGS, SOURCE_DIR, compile_shared_library, sanitize_requested, sdk_sources
from shimkit.store import default_store
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from shimkit.testing.strategies import tensors

FALLBACKS = SOURCE_DIR / "metal_runtime" / "fallbacks"
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


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    import torch.utils.cpp_extension as cpp_extension

    sources = [*sorted(FALLBACKS.glob("*.cpp")), ADDMM_KERNEL / "addmm_plan.cpp", ADDMM_KERNEL / "addmm_reference.cpp",
               ADDMM_KERNEL / "addmm_shim_standin.cpp",
               *sdk_sources()]
    flags = SANITIZER_FLAGS if sanitize_requested() else ("-O2",)
    path = compile_shared_library(
        "shimkit_metal_fallbacks", sources, include_dirs=cpp_extension.include_paths(),
        library_dirs=cpp_extension.library_paths(), libraries=["torch", "torch_cpu", "c10"],
        extra_flags=(*flags, "-include", str(prototype_header())))
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, I32
    lib.shimkit_metal_fallback_last_error.argtypes, lib.shimkit_metal_fallback_last_error.restype = [], ctypes.c_char_p
    return lib


@pytest.fixture(scope="module", autouse=True)
def _built():
    library()  # built before any hypothesis example runs


def last_error() -> str:
    return library().shimkit_metal_fallback_last_error().decode()


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


def call(name: str, *args) -> int:
    return getattr(library(), name)(*args)


def assert_fails(status: int, *words: str) -> None:
    message = last_error()
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


LAYOUTS = st.sampled_from(["contiguous", "transposed", "sliced", "permuted"])
SEEDS = st.integers(0, 2 ** 31 - 1)


def values(specials: bool):
    """Finite floats, and with ``specials`` NaN, infinities and -0.0 too."""
    finite = st.floats(-4, 4, width=32)
    return (finite | st.sampled_from((math.nan, math.inf, -math.inf, -0.0))) if specials else finite


# ---------------------------------------------------------------------------------------------- symbols


def test_every_fallback_the_metal_backend_declares_is_exported():
    from executorch.backends.apple.metal.metal_backend import MetalBackend

    declared = {name for name in MetalBackend.get_supported_fallback_kernels() if name.startswith("aoti_torch_")}
    assert declared == set(SIGNATURES)
    for name in declared:
        assert hasattr(library(), name)


def test_the_signatures_are_the_ones_inductor_calls():
    # The build force-includes c_shim_mps.h and the custom prototypes: a differing definition would not
    # have compiled. Here: the prototypes really name these symbols.
    names = {prototype.split("(")[0].split()[-1] for prototype in custom_prototypes()}
    assert names == {"aoti_torch_mps__linear_fp_act_4bit_weight", "aoti_torch_mps_gather_qmv",
                     "aoti_torch_mps_gated_delta_rule"}


# ---------------------------------------------------------------------------------------------- mm, bmm


def product_exact(a: torch.Tensor, b: torch.Tensor):
    """(a @ b, |a| @ |b|) in float64 from elementwise products, so NaN and inf follow IEEE exactly."""
    a, b = a.double(), b.double()
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2), (a.abs().unsqueeze(-1) * b.abs().unsqueeze(-3)).sum(-2)


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), m=st.integers(0, 5), k=st.integers(0, 5),
       n=st.integers(0, 5), specials=st.booleans())
def test_mm_matches_torch(data, dtype, m, k, n, specials):
    self_ = data.draw(tensors((m, k), dtype, elements=lambda _: values(specials)))
    mat2 = data.draw(tensors((k, n), dtype, elements=lambda _: values(specials)))
    out = data.draw(tensors((m, n), dtype))
    expected = torch.mm(self_, mat2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_mm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    exact, magnitude = product_exact(self_, mat2)
    assert_rounded_once(out, exact, (k + 2) * U32 * magnitude, pattern=expected)


def test_mm_reads_a_transposed_self_and_mat2_through_their_strides():
    self_ = torch.arange(12.0).reshape(4, 3).t()  # what upstream's mm reads as dense
    mat2 = torch.arange(8.0).reshape(2, 4).t()
    out = torch.empty(3, 2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_mm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    assert torch.equal(out, self_ @ mat2)


@pytest.mark.parametrize("case, words", [
    ("out_shape", ("out has shape [3, 3]", "[2, 3]")),
    ("out_dtype", ("out is bfloat16", "self is float32")),
    ("mat2_dtype", ("mat2 is bfloat16",)),
    ("float16", ("self has dtype float16", "float32, bfloat16")),
    ("float64", ("self has dtype float64",)),
    ("rank", ("self must be 2-D",)),
    ("shapes", ("cannot be multiplied", "2x4 and 3x3")),
    ("broadcast_out", ("out is broadcast",)),
])
def test_mm_errors_name_the_argument(case, words):
    self_, mat2, out = torch.ones(2, 4), torch.ones(4, 3), torch.empty(2, 3)
    if case == "out_shape":
        out = torch.empty(3, 3)
    elif case == "out_dtype":
        out = out.bfloat16()
    elif case == "mat2_dtype":
        mat2 = mat2.bfloat16()
    elif case in ("float16", "float64"):
        dtype = getattr(torch, case)
        self_, mat2, out = self_.to(dtype), mat2.to(dtype), out.to(dtype)
    elif case == "rank":
        self_ = torch.ones(8)
    elif case == "shapes":
        mat2 = torch.ones(3, 3)
    elif case == "broadcast_out":
        out = torch.empty(1, 3).expand(2, 3)
    with tensor_handles(out, self_, mat2) as handles:
        assert_fails(call("aoti_torch_mps_mm_out", *handles), "aoti_torch_mps_mm_out: ", *words)


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), b=st.integers(0, 3), m=st.integers(0, 4),
       k=st.integers(0, 4), n=st.integers(0, 4), specials=st.booleans())
def test_bmm_matches_torch(data, dtype, b, m, k, n, specials):
    self_ = data.draw(tensors((b, m, k), dtype, elements=lambda _: values(specials), layouts=False))
    mat2 = data.draw(tensors((b, k, n), dtype, elements=lambda _: values(specials), layouts=False))
    out = torch.full((b, m, n), math.nan, dtype=dtype)
    expected = torch.bmm(self_, mat2)
    with tensor_handles(out, self_, mat2) as handles:
        assert call("aoti_torch_mps_bmm_out", *handles) == AOTI_TORCH_SUCCESS, last_error()
    exact, magnitude = product_exact(self_, mat2)
    assert_rounded_once(out, exact, (k + 2) * U32 * magnitude, pattern=expected)


@pytest.mark.parametrize("case, words", [
    ("transposed_mat2", ("mat2 must be contiguous", "dense")),
    ("sliced_self", ("self must be contiguous",)),
    ("strided_out", ("out must be contiguous",)),
    ("float16", ("self has dtype float16",)),
    ("batch", ("batch size mismatch", "mat2 has 3")),
    ("out_shape", ("out has shape [2, 2, 5]",)),
    ("rank", ("mat2 must be 3-D",)),
])
def test_bmm_refuses_what_upstream_refuses(case, words):
    self_, mat2, out = torch.ones(2, 2, 4), torch.ones(2, 4, 3), torch.empty(2, 2, 3)
    if case == "transposed_mat2":
        mat2 = torch.ones(2, 3, 4).mT
    elif case == "sliced_self":
        self_ = torch.ones(2, 2, 8)[..., ::2]
    elif case == "strided_out":
        out = torch.empty(2, 3, 2).mT
    elif case == "float16":
        self_, mat2, out = self_.half(), mat2.half(), out.half()
    elif case == "batch":
        mat2 = torch.ones(3, 4, 3)
    elif case == "out_shape":
        out = torch.empty(2, 2, 5)
    elif case == "rank":
        mat2 = torch.ones(4, 3)
    with tensor_handles(out, self_, mat2) as handles:
        assert_fails(call("aoti_torch_mps_bmm_out", *handles), "aoti_torch_mps_bmm_out: ", *words)


# ---------------------------------------------------------------------------------------------- addmm


def addmm_exact(self_, mat1, mat2, beta, alpha):
    """The plugin's rules in float64: beta == 0 ignores self, alpha == 0 ignores the product."""
    product, magnitude = product_exact(mat1, mat2)
    exact = torch.zeros_like(product)
    bound = torch.zeros_like(product)
    if alpha != 0 and mat1.shape[1] > 0:
        exact, bound = alpha * product, abs(alpha) * magnitude
    if beta != 0:
        exact = exact + beta * self_.double()
        bound = bound + abs(beta) * self_.double().abs()
    return exact, (mat1.shape[1] + 4) * U32 * bound


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from((torch.float32, torch.bfloat16, torch.float16)), m=st.integers(0, 4),
       k=st.integers(0, 4), n=st.integers(0, 4), specials=st.booleans(),
       beta=st.sampled_from((0.0, 1.0, 0.5, -2.0)), alpha=st.sampled_from((0.0, 1.0, 1.5)))
def test_addmm_is_the_plugins_adapter_over_the_aoti_api(data, dtype, m, k, n, specials, beta, alpha):
    self_shape = data.draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), ()]))
    self_ = data.draw(tensors(self_shape, dtype, elements=lambda _: values(specials)))
    mat1 = data.draw(tensors((m, k), dtype, elements=lambda _: values(specials)))
    mat2 = data.draw(tensors((k, n), dtype, elements=lambda _: values(specials)))
    out = data.draw(tensors((m, n), dtype))
    with tensor_handles(out, self_, mat1, mat2) as handles:
        assert call("aoti_torch_mps_addmm_out", *handles, beta, alpha) == AOTI_TORCH_SUCCESS, last_error()
    exact, bound = addmm_exact(self_.expand(m, n), mat1, mat2, beta, alpha)
    assert_rounded_once(out, exact, bound)


def test_addmm_errors_name_the_argument():
    self_, mat1, mat2 = torch.ones(3), torch.ones(2, 4), torch.ones(4, 3)
    with tensor_handles(torch.empty(3, 2), self_, mat1, mat2) as handles:
        assert_fails(call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0), "aoti_torch_mps_addmm_out: ", "out has shape")
    with tensor_handles(torch.empty(2, 3), self_, mat1, mat2.bfloat16()) as handles:
        assert_fails(call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0), "mat2 is bfloat16")


# ---------------------------------------------------------------------------------------------- topk


def topk_call(self_: torch.Tensor, k: int, dim: int, largest: bool, sorted_: bool = True):
    values_, indices = H(), H()
    with tensor_handles(self_) as (handle,):
        status = call("aoti_torch_mps_topk", handle, k, dim, int(largest), int(sorted_), ctypes.byref(values_),
                      ctypes.byref(indices))
    return status, values_, indices


@EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), shape=st.lists(st.integers(0, 5), max_size=3),
       largest=st.booleans(), sorted_=st.booleans(), specials=st.booleans())
def test_topk_matches_torch(data, dtype, shape, largest, sorted_, specials):
    ties = st.integers(-2, 2).map(float)  # plenty of equal values
    elements = (ties | st.sampled_from((math.nan, math.inf, -math.inf, -0.0))) if specials else ties | values(False)
    self_ = data.draw(tensors(tuple(shape), dtype, elements=lambda _: elements))
    rank = max(len(shape), 1)
    dim = data.draw(st.integers(-rank, rank - 1))
    length = shape[dim] if shape else 1
    k = data.draw(st.integers(0, length))
    status, values_handle, indices_handle = topk_call(self_, k, dim, largest, sorted_)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    values_, indices = steal(values_handle), steal(indices_handle)
    expected = torch.topk(self_, k, dim, largest=largest, sorted=True)
    assert values_.dtype == dtype and indices.dtype == torch.int64 and values_.is_contiguous() and indices.is_contiguous()
    assert values_.device.type == "cpu"
    # Values and their order are ATen's; indices point at them, each once (ties may be ordered differently).
    assert torch.equal(values_.isnan(), expected.values.isnan())
    assert torch.equal(values_.nan_to_num(), expected.values.nan_to_num())
    if self_.dim() and values_.numel():
        gathered = self_.gather(dim, indices)
        assert torch.equal(gathered.nan_to_num(), values_.nan_to_num()) and torch.equal(gathered.isnan(), values_.isnan())
        assert (indices.sort(dim).values.diff(dim=dim) > 0).all()  # each index once


def test_topk_ranks_nan_above_everything_as_aten():
    self_ = torch.tensor([1.0, math.nan, 3.0, math.inf, math.nan, -1.0])
    for largest in (True, False):
        status, values_handle, indices_handle = topk_call(self_, 4, 0, largest)
        assert status == AOTI_TORCH_SUCCESS, last_error()
        values_, indices = steal(values_handle), steal(indices_handle)
        expected = torch.topk(self_, 4, largest=largest)
        assert torch.equal(values_.nan_to_num(), expected.values.nan_to_num())
        assert torch.equal(indices, expected.indices)


@pytest.mark.parametrize("case, words", [
    ("k", ("k=5 is out of range", "4 elements along dim 1")),
    ("negative_k", ("k=-1 is out of range",)),
    ("dim", ("dim 2 is out of range",)),
    ("float16", ("self has dtype float16",)),
    ("int", ("self has dtype int64",)),
])
def test_topk_errors_name_the_argument(case, words):
    self_, k, dim = torch.ones(3, 4), 2, 1
    if case == "k":
        k = 5
    elif case == "negative_k":
        k = -1
    elif case == "dim":
        dim = 2
    elif case == "float16":
        self_ = self_.half()
    elif case == "int":
        self_ = self_.long()
    status, values_handle, indices_handle = topk_call(self_, k, dim, True)
    assert_fails(status, "aoti_torch_mps_topk: ", *words)
    assert values_handle.value is None and indices_handle.value is None


# ---------------------------------------------------------------------------------------------- convolution


def conv_call(input_, weight, bias, stride, padding, dilation, groups, *, transposed=0, bias_pointer="handle"):
    result = H()
    tensors_ = [input_, weight] + ([bias] if bias is not None else [])
    with tensor_handles(*tensors_) as handles:
        if bias is not None:
            bias_argument = optional(handles[2])
        else:
            bias_argument = None if bias_pointer == "null" else optional(None)
        status = call("aoti_torch_mps_convolution", handles[0], handles[1], bias_argument,
                      int_array(stride), len(stride), int_array(padding), len(padding), int_array(dilation),
                      len(dilation), transposed, int_array([0] * len(stride)), len(stride), groups,
                      ctypes.byref(result))
    return status, result


@FEW_EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), spatial=st.integers(1, 3), batched=st.booleans(),
       groups=st.integers(1, 2), has_bias=st.booleans(), layout=LAYOUTS, seed=SEEDS, specials=st.booleans())
def test_convolution_matches_torch(data, dtype, spatial, batched, groups, has_bias, layout, seed, specials):
    batch = data.draw(st.integers(0 if batched else 1, 2))
    group_in, group_out = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    given_values = 1 if data.draw(st.booleans()) else spatial  # one value stands for every dim, as in ATen
    stride = [data.draw(st.integers(1, 2)) for _ in range(given_values)]
    padding = [data.draw(st.integers(0, 2)) for _ in range(given_values)]
    dilation = [data.draw(st.integers(1, 2)) for _ in range(given_values)]
    # Spatial sizes the dilated kernel fits into once padded.
    sizes = [max(1, dilation[i % given_values] * (kk - 1) + 1 - 2 * padding[i % given_values]
                 + data.draw(st.integers(0, 3))) for i, kk in enumerate(kernel)]
    input_ = random((batch, group_in * groups, *sizes), dtype, seed)
    weight = random((group_out * groups, group_in, *kernel), dtype, seed + 1)
    bias = random((group_out * groups,), dtype, seed + 2) if has_bias else None
    if specials and input_.numel():
        flat = input_.view(-1)
        flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(st.sampled_from((math.nan, math.inf, -math.inf)))
    expected = torch.convolution(input_, weight, bias, stride, padding, dilation, False, [0] * given_values, groups)
    exact = torch.convolution(input_.double(), weight.double(), None if bias is None else bias.double(), stride,
                              padding, dilation, False, [0] * given_values, groups)
    magnitude = torch.convolution(input_.double().abs(), weight.double().abs(),
                                  None if bias is None else bias.double().abs(), stride, padding, dilation, False,
                                  [0] * given_values, groups)
    if not batched:
        input_, expected, exact, magnitude = input_[0], expected[0], exact[0], magnitude[0]
    status, result = conv_call(strided(input_, layout), strided(weight, data.draw(LAYOUTS)), bias, stride, padding,
                               dilation, groups, bias_pointer=data.draw(st.sampled_from(["null", "handle"])))
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.is_contiguous() and output.dtype == dtype
    taps = group_in * math.prod(kernel)
    # NaN and inf where float64 has them: ATen's bfloat16 CPU convolution spreads a NaN to outputs whose window
    # holds none (found by hypothesis: a NaN at input[0, 0, 1] gave NaN at output [0, 0, 0] too).
    assert_rounded_once(output, exact, (taps + 3) * U32 * magnitude, pattern=exact if dtype == torch.bfloat16 else expected)


@pytest.mark.parametrize("bias", [None, torch.arange(4.0)])
def test_convolution_of_zero_input_channels_has_zero_channels_as_in_aten(bias):
    input_, weight = torch.ones(2, 0, 5), torch.ones(4, 0, 2)
    status, result = conv_call(input_, weight, bias, [1], [0], [1], 1)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    expected = torch.convolution(input_, weight, bias, [1], [0], [1], False, [0], 1)
    assert steal(result).shape == expected.shape == (2, 0, 4)  # ATen's (and its meta function's) shape


@pytest.mark.parametrize("case, words", [
    ("transposed", ("transposed convolution is not supported",)),
    ("float16", ("input has dtype float16",)),
    ("weight_dtype", ("weight is bfloat16", "input is float32")),
    ("channels", ("expects input to have 4 channels", "has 3")),
    ("groups", ("divisible by groups=3",)),
    ("bias", ("bias must be 1-D with 4 elements",)),
    ("stride_len", ("expected stride to be a single integer value or a list of 2 values",)),
    ("stride_zero", ("stride must be positive",)),
    ("padding_negative", ("padding must be non-negative",)),
    ("too_small", ("smaller than the dilated kernel size",)),
    ("weight_rank", ("weight must be 3-D, 4-D or 5-D",)),
    ("input_rank", ("input must be 3-D or 4-D",)),
    ("empty_spatial", ("empty in a non-batch dimension",)),
])
def test_convolution_errors_name_the_argument(case, words):
    input_, weight, bias = torch.ones(1, 4, 5, 5), torch.ones(4, 4, 3, 3), None
    stride, padding, dilation, groups, transposed = [1, 1], [0, 0], [1, 1], 1, 0
    if case == "transposed":
        transposed = 1
    elif case == "float16":
        input_, weight = input_.half(), weight.half()
    elif case == "weight_dtype":
        weight = weight.bfloat16()
    elif case == "channels":
        input_ = torch.ones(1, 3, 5, 5)
    elif case == "groups":
        groups = 3
        weight = torch.ones(4, 1, 3, 3)
        input_ = torch.ones(1, 3, 5, 5)
    elif case == "bias":
        bias = torch.ones(3)
    elif case == "stride_len":
        stride = [1, 1, 1]
    elif case == "stride_zero":
        stride = [0, 1]
    elif case == "padding_negative":
        padding = [-1, 0]
    elif case == "too_small":
        input_ = torch.ones(1, 4, 2, 5)
    elif case == "weight_rank":
        weight = torch.ones(4, 4)
    elif case == "input_rank":
        input_ = torch.ones(4, 5)
    elif case == "empty_spatial":
        input_ = torch.ones(1, 4, 0, 5)
        padding = [2, 0]
    status, result = conv_call(input_, weight, bias, stride, padding, dilation, groups, transposed=transposed)
    assert_fails(status, "aoti_torch_mps_convolution: ", *words)
    assert result.value is None


# ---------------------------------------------------------------------------------------------- sdpa


def sdpa_call(query, key, value, mask, *, is_causal=False, scale=None, enable_gqa=None, dropout_p=0.0,
              dropout_mask=None):
    out, weights = H(), H()
    extra = [m for m in (mask, dropout_mask) if m is not None]
    with tensor_handles(query, key, value, *extra) as handles:
        mask_handle = handles[3] if mask is not None else None
        dropout_handle = handles[-1] if dropout_mask is not None else None
        scale_argument = ctypes.byref(F64(scale)) if scale is not None else None
        args = [handles[0], handles[1], handles[2], optional(mask_handle), dropout_p, int(is_causal),
                optional(dropout_handle), scale_argument]
        if enable_gqa is None:
            status = call("aoti_torch_mps__scaled_dot_product_attention_math_for_mps", *args, ctypes.byref(out),
                          ctypes.byref(weights))
        else:
            status = call("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", *args, int(enable_gqa),
                          ctypes.byref(out), ctypes.byref(weights))
    return status, out, weights


def every_other_position(tensor: torch.Tensor) -> torch.Tensor:
    """The same [B, H, S, D] values at every other position of a NaN-filled buffer, at an offset."""
    batch, heads, length, dim = tensor.shape
    buffer = torch.full((batch, heads, 2 * length + 1, dim), math.nan, dtype=tensor.dtype)
    view = buffer[:, :, 1::2]
    view.copy_(tensor)
    return view


def bshd(tensor: torch.Tensor) -> torch.Tensor:
    """The same [B, H, S, D] values stored as [B, S, H, D] (a transpose of dims 1 and 2), as models keep them."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2)


@FEW_EXAMPLES
@given(data=st.data(), dtype=st.sampled_from(METAL_DTYPES), batch=st.integers(1, 2), heads=st.sampled_from((1, 2, 4)),
       q_length=st.integers(0, 4), kv_length=st.integers(0, 5), head_dim=st.sampled_from((64, 96)), seed=SEEDS,
       v2=st.booleans(), mask_kind=st.sampled_from(["none", "causal", "full", "rows", "per_batch", "per_head"]))
def test_sdpa_matches_aten_math(data, dtype, batch, heads, q_length, kv_length, head_dim, seed, v2, mask_kind):
    kv_heads = data.draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0 and (v2 or h in (1, heads))]))
    kv_batch = data.draw(st.sampled_from((1, batch)))
    query = random((batch, heads, q_length, head_dim), dtype, seed)
    key = random((kv_batch, kv_heads, kv_length, head_dim), dtype, seed + 1)
    value = random((kv_batch, kv_heads, kv_length, head_dim), dtype, seed + 2)
    mask = None
    mask_shape = {"full": (batch, heads, q_length, kv_length), "rows": (q_length, kv_length),
                  "per_batch": (batch, 1, q_length, kv_length), "per_head": (heads, 1, kv_length)}.get(mask_kind)
    if mask_shape is not None:
        mask = random(mask_shape, dtype, seed + 3)
        hidden = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed + 4)) < 0.3
        mask = mask.masked_fill(hidden, -math.inf)  # whole rows masked out included, now and then
    scale = data.draw(st.sampled_from((None, 0.3)))
    is_causal = mask_kind == "causal"
    q_in = data.draw(st.sampled_from([query, bshd(query)]))
    k_in = data.draw(st.sampled_from([key, bshd(key), every_other_position(key)]))
    status, out_handle, weights_handle = sdpa_call(q_in, k_in, bshd(value), mask, is_causal=is_causal, scale=scale,
                                                   enable_gqa=(kv_heads != heads) if v2 else None)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out, weights = steal(out_handle), steal(weights_handle)
    assert out.shape == (batch, heads, q_length, head_dim) and weights.shape == (batch, heads, q_length, kv_length)
    assert out.dtype == weights.dtype == dtype and out.is_contiguous() and weights.is_contiguous()
    exact_out, exact_weights = torch.ops.aten._scaled_dot_product_attention_math(
        query.double(), key.double(), value.double(), None if mask is None else mask.double(), 0.0, is_causal, None,
        scale=scale, enable_gqa=kv_heads != heads)
    weights_bound, out_bound = sdpa_error_bounds(query, key, value, mask, exact_weights, scale)
    assert_rounded_once(weights, exact_weights, weights_bound, what="attn_weight")
    assert_rounded_once(out, exact_out, out_bound, what="output")


def sdpa_error_bounds(query, key, value, mask, exact_weights, scale):
    """What float32 arithmetic may change in the weights and the output: an error e_j in score j moves
    weight j by at most w_j (2 max_j e_j) plus the roundings of exp, the sum and the division."""
    q, k, v = query.double(), key.double(), value.double()
    repeat = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)  # kv heads of each query head
    head_dim, kv_length = q.shape[-1], k.shape[-2]
    factor = scale if scale is not None else 1 / math.sqrt(head_dim)
    scores = factor * q.abs() @ k.abs().mT
    score_error = (head_dim + 3) * U32 * scores
    if mask is not None:
        score_error = score_error + U32 * (scores + mask.double().abs().nan_to_num(posinf=0.0))
    row_error = score_error.amax(-1, keepdim=True) if kv_length else score_error.sum(-1, keepdim=True)
    relative = 2 * row_error + (kv_length + 4) * U32
    return exact_weights * relative, (exact_weights @ v.abs()) * (relative + (kv_length + 2) * U32)


def test_sdpa_nan_and_inf_propagate_as_in_aten():
    query = random((1, 1, 3, 64), torch.float32, 7)
    key = random((1, 1, 4, 64), torch.float32, 8)
    value = random((1, 1, 4, 64), torch.float32, 9)
    key[0, 0, 3, 5] = math.nan     # reaches every row, including those that mask key 3 out
    value[0, 0, 1, 2] = math.inf   # times a zero weight is NaN, as in ATen's matmul
    mask = torch.zeros(3, 4)
    mask[2] = -math.inf            # a fully masked row
    status, out_handle, weights_handle = sdpa_call(query, key, value, mask)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out, weights = steal(out_handle), steal(weights_handle)
    expected_out, expected_weights = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, mask)
    assert torch.equal(out.isnan(), expected_out.isnan()) and torch.equal(weights.isnan(), expected_weights.isnan())


def test_sdpa_causal_is_top_left_aligned_as_aten():
    query = random((1, 2, 3, 64), torch.float32, 1)
    key = random((1, 2, 5, 64), torch.float32, 2)
    value = random((1, 2, 5, 64), torch.float32, 3)
    status, out_handle, weights_handle = sdpa_call(query, key, value, None, is_causal=True)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    out, weights = steal(out_handle), steal(weights_handle)
    expected_out, expected_weights = torch.ops.aten._scaled_dot_product_attention_math(query, key, value, is_causal=True)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    future = torch.arange(5).view(1, 5) > torch.arange(3).view(3, 1)  # query i sees keys 0..i (top-left)
    assert (weights[:, :, future] == 0).all() and (weights[:, :, ~future] > 0).all()


@pytest.mark.parametrize("case, words", [
    ("dropout", ("dropout_p=0.1", "not supported")),
    ("dropout_mask", ("dropout_mask is not supported",)),
    ("head_dim", ("query has head_dim 32", "64, 96, 128 and 256")),
    ("value_head_dim", ("value has head_dim 128",)),
    ("float16", ("query has dtype float16",)),
    ("key_dtype", ("key is bfloat16",)),
    ("bool_mask", ("attn_mask has dtype bool",)),
    ("mask_shape", ("attn_mask of shape [3, 4] does not broadcast",)),
    ("mask_and_causal", ("attn_mask must not be given with is_causal",)),
    ("gqa_v1", ("key has 2 heads but query has 4", "enable_gqa")),
    ("gqa_multiple", ("not a multiple of key's 3",)),
    ("rank", ("query must be 4-D",)),
    ("last_stride", ("key must have a unit stride along head_dim",)),
])
def test_sdpa_errors_name_the_argument(case, words):
    query, key, value = torch.ones(1, 4, 3, 64), torch.ones(1, 4, 5, 64), torch.ones(1, 4, 5, 64)
    mask, kwargs = None, {}
    if case == "dropout":
        kwargs["dropout_p"] = 0.1
    elif case == "dropout_mask":
        kwargs["dropout_mask"] = torch.ones(1, 4, 3, 5)
    elif case == "head_dim":
        query, key, value = query[..., :32], key[..., :32], value[..., :32]
    elif case == "value_head_dim":
        value = torch.ones(1, 4, 5, 128)
    elif case == "float16":
        query, key, value = query.half(), key.half(), value.half()
    elif case == "key_dtype":
        key = key.bfloat16()
    elif case == "bool_mask":
        mask = torch.ones(3, 5, dtype=torch.bool)
    elif case == "mask_shape":
        mask = torch.ones(3, 4)
    elif case == "mask_and_causal":
        mask, kwargs["is_causal"] = torch.zeros(3, 5), True
    elif case == "gqa_v1":
        key, value = key[:, :2], value[:, :2]
    elif case == "gqa_multiple":
        key, value, kwargs["enable_gqa"] = torch.ones(1, 3, 5, 64), torch.ones(1, 3, 5, 64), True
    elif case == "rank":
        query = query[0]
    elif case == "last_stride":
        key = torch.ones(1, 4, 5, 128)[..., ::2]
    status, out, weights = sdpa_call(query, key, value, mask, **kwargs)
    symbol = "aoti_torch_mps__scaled_dot_product_attention_math_for_mps" + ("_v2" if "enable_gqa" in kwargs else "")
    assert_fails(status, symbol + ": ", *words)
    assert out.value is None and weights.value is None


# ---------------------------------------------------------------------------------------------- 4-bit weights


def packed_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes in [0, 16) along the last dim packed two to a byte, the even element in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def dequantized(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """float64 weights scale * code + zero from packed nibbles (the inverse of packed_nibbles)."""
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).flatten(-2).double()
    return (codes * scales.double().repeat_interleave(group_size, -1)
            + zeros.double().repeat_interleave(group_size, -1))


def test_the_nibble_order_is_executorchs():
    from executorch.backends.apple.metal.ops.gather_qmv import _dequantize_int4_affine

    codes = torch.randint(0, 16, (3, 64), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    scales, zeros = torch.rand(3, 2) + 0.5, torch.rand(3, 2)
    ours = dequantized(packed_nibbles(codes), scales, zeros, 32)
    theirs = _dequantize_int4_affine(packed_nibbles(codes), scales, zeros, 64, 32)
    torch.testing.assert_close(ours.float(), theirs)


def linear_4bit_call(a, b, group_size, s, z):
    result = H()
    with tensor_handles(a, b, s, z) as handles:
        status = call("aoti_torch_mps__linear_fp_act_4bit_weight", handles[0], handles[1], group_size, handles[2],
                      handles[3], ctypes.byref(result))
    return status, result


@EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), m=st.integers(0, 3), quads=st.integers(1, 3),
       group_size=st.sampled_from((32, 64, 128, 256)), groups=st.integers(1, 2), seed=SEEDS, specials=st.booleans())
def test_linear_4bit_matches_its_dequantized_product(dtype, m, quads, group_size, groups, seed, specials):
    n, k = 4 * quads - (1 if m == 1 and quads > 1 else 0), group_size * groups  # N % 4 == 0 unless M == 1
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=generator, dtype=torch.uint8)
    a = random((m, k), dtype, seed)
    if specials and a.numel():
        a.view(-1)[0] = math.inf
    s = (torch.rand(n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
    z = random((n, groups), dtype, seed + 1, scale=0.5)
    status, result = linear_4bit_call(a, packed_nibbles(codes), group_size, s, z)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.shape == (m, n) and output.dtype == dtype and output.is_contiguous()
    weight = dequantized(packed_nibbles(codes), s, z, group_size)
    exact, magnitude = product_exact(a, weight.t())
    assert_rounded_once(output, exact, (k + 4) * U32 * magnitude)


@pytest.mark.parametrize("case, words", [
    ("group_size", ("group_size 48 is not one of 32, 64, 128, 256",)),
    ("b_dtype", ("B has dtype int8", "uint8")),
    ("b_columns", ("B must have K / 2 = 32 columns",)),
    ("k8", ("K = 68 is not a multiple of 8",)),
    ("n4", ("N = 6 (B's rows) must be a multiple of 4 when M = 2",)),
    ("k_group", ("K = 96 is not a multiple of group_size 64",)),
    ("a_dtype", ("A has dtype float16",)),
    ("a_contiguous", ("A must be contiguous",)),
    ("s_dtype", ("S is float32", "A is bfloat16")),
    ("z_shape", ("Z must be [N, K / group_size] = [8, 2]",)),
])
def test_linear_4bit_refuses_what_upstream_refuses(case, words):
    a, b = torch.ones(2, 64), torch.zeros(8, 32, dtype=torch.uint8)
    group_size, s, z = 32, torch.ones(8, 2), torch.zeros(8, 2)
    if case == "group_size":
        group_size = 48
    elif case == "b_dtype":
        b = b.to(torch.int8)
    elif case == "b_columns":
        b = torch.zeros(8, 16, dtype=torch.uint8)
    elif case == "k8":
        a, b = torch.ones(2, 68), torch.zeros(8, 34, dtype=torch.uint8)
    elif case == "n4":
        b, s, z = b[:6], s[:6], z[:6]
    elif case == "k_group":
        a, b, group_size = torch.ones(2, 96), torch.zeros(8, 48, dtype=torch.uint8), 64
    elif case == "a_dtype":
        a = a.half()
    elif case == "a_contiguous":
        a = torch.ones(64, 2).t()
    elif case == "s_dtype":
        a, z = a.bfloat16(), z.bfloat16()
    elif case == "z_shape":
        z = torch.zeros(8, 3)
    status, result = linear_4bit_call(a, b, group_size, s, z)
    assert_fails(status, "aoti_torch_mps__linear_fp_act_4bit_weight: ", *words)
    assert result.value is None


def gather_qmv_call(x, w, scales, biases, indices, group_size):
    result = H()
    with tensor_handles(x, w, scales, biases, indices) as handles:
        status = call("aoti_torch_mps_gather_qmv", *handles, group_size, ctypes.byref(result))
    return status, result


@EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), pairs=st.integers(0, 4), experts=st.integers(1, 3), n=st.integers(1, 5),
       group_size=st.sampled_from((32, 64, 128)), groups=st.integers(1, 2), seed=SEEDS, layout=LAYOUTS)
def test_gather_qmv_matches_executorchs_reference(dtype, pairs, experts, n, group_size, groups, seed, layout):
    from executorch.backends.apple.metal.ops.gather_qmv import gather_qmv as reference

    k = group_size * groups
    generator = torch.Generator().manual_seed(seed)
    w = packed_nibbles(torch.randint(0, 16, (experts, n, k), generator=generator, dtype=torch.uint8))
    scales = (torch.rand(experts, n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
    biases = random((experts, n, groups), dtype, seed + 1, scale=0.5)
    indices = torch.randint(0, experts, (pairs,), generator=generator, dtype=torch.int32)
    x = random((pairs, k), dtype, seed + 2)
    status, result = gather_qmv_call(strided(x, layout), strided(w, layout), strided(scales, layout), biases,
                                     strided(indices, "sliced"), group_size)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    output = steal(result)
    assert output.shape == (pairs, n) and output.dtype == dtype and output.is_contiguous()
    weights = dequantized(w, scales, biases, group_size)[indices.long()]  # [P, N, K]
    exact = (weights * x.double().unsqueeze(1)).sum(-1)
    magnitude = (weights.abs() * x.double().abs().unsqueeze(1)).sum(-1)
    assert_rounded_once(output, exact, (k + 4) * U32 * magnitude)
    if dtype == torch.float32 and pairs:  # ExecuTorch's own reference, which rounds the weights to the scales' dtype first
        torch.testing.assert_close(output, reference(x, w, scales, biases, indices, group_size), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case, words", [
    ("group_size", ("group_size 256 is not one of 32, 64, 128",)),
    ("int64_indices", ("expert_indices has dtype int64", "int32")),
    ("index_range", ("expert_indices[1] = 3 is not an expert index in [0, 3)",)),
    ("index_count", ("expert_indices has 1 entries but x has P = 2",)),
    ("scales_dtype", ("scales is bfloat16",)),
    ("biases_shape", ("biases must be [E, N, K / group_size] = [3, 4, 2]",)),
    ("w_bytes", ("w must have K / 2 = 32 bytes per row",)),
    ("x_dtype", ("x has dtype float16",)),
    ("w_rank", ("w must be 3-D",)),
])
def test_gather_qmv_refuses_what_it_cannot_compute(case, words):
    x, w = torch.ones(2, 64), torch.zeros(3, 4, 32, dtype=torch.uint8)
    scales, biases, indices, group_size = torch.ones(3, 4, 2), torch.zeros(3, 4, 2), torch.tensor([0, 2], dtype=torch.int32), 32
    if case == "group_size":
        group_size = 256
    elif case == "int64_indices":
        indices = indices.long()
    elif case == "index_range":
        indices = torch.tensor([0, 3], dtype=torch.int32)
    elif case == "index_count":
        indices = indices[:1]
    elif case == "scales_dtype":
        scales = scales.bfloat16()
    elif case == "biases_shape":
        biases = torch.zeros(3, 4, 1)
    elif case == "w_bytes":
        w = torch.zeros(3, 4, 16, dtype=torch.uint8)
    elif case == "x_dtype":
        x, scales, biases = x.half(), scales.half(), biases.half()
    elif case == "w_rank":
        w = w[0]
    status, result = gather_qmv_call(x, w, scales, biases, indices, group_size)
    assert_fails(status, "aoti_torch_mps_gather_qmv: ", *words)
    assert result.value is None


# ---------------------------------------------------------------------------------------------- gated delta rule


def gated_delta_inputs(batch, steps, hk, dk, hv, dv, dtype, seed):
    q = torch.nn.functional.normalize(random((batch, steps, hk, dk), torch.float64, seed), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(random((batch, steps, hk, dk), torch.float64, seed + 1), dim=-1).to(dtype)
    v = random((batch, steps, hv, dv), dtype, seed + 2)
    generator = torch.Generator().manual_seed(seed + 3)
    g = (torch.rand(batch, steps, hv, generator=generator, dtype=torch.float64) * 0.5 + 0.5).to(dtype)
    beta = torch.rand(batch, steps, hv, generator=generator, dtype=torch.float64).to(dtype)
    state = random((batch, hv, dv, dk), dtype, seed + 4, scale=0.1)
    return q, k, v, g, beta, state


def gated_delta_call(q, k, v, g, beta, state):
    result = H()
    with tensor_handles(q, k, v, g, beta, state) as handles:
        status = call("aoti_torch_mps_gated_delta_rule", *handles, ctypes.byref(result))
    return status, result


def check_gated_delta(q, k, v, g, beta, state, layout="contiguous"):
    from executorch.backends.apple.metal.ops.gated_delta_rule import gated_delta_rule as reference

    dtype = q.dtype
    expected_state = state.clone()
    if q.shape[1]:
        expected = reference(q, k, v, g, beta, expected_state)  # ExecuTorch's own recurrence (float32, state mutated)
    else:  # which cannot stack no steps
        expected = torch.empty_like(v)
    state_in = strided(state, layout)
    status, result = gated_delta_call(strided(q, layout), strided(k, layout), strided(v, layout), g, beta, state_in)
    assert status == AOTI_TORCH_SUCCESS, last_error()
    y = steal(result)
    assert y.shape == v.shape and y.dtype == dtype and y.is_contiguous()
    # Both run the recurrence in float32 and round once; the orders of their sums differ.
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2 ** -7, "atol": 1e-4}
    torch.testing.assert_close(y, expected, **tolerance)
    torch.testing.assert_close(state_in, expected_state, **tolerance)


@FEW_EXAMPLES
@given(dtype=st.sampled_from(METAL_DTYPES), batch=st.integers(1, 2), steps=st.integers(0, 3), seed=SEEDS,
       layout=LAYOUTS)
def test_gated_delta_rule_matches_executorchs_reference(dtype, batch, steps, seed, layout):
    check_gated_delta(*gated_delta_inputs(batch, steps, 4, 64, 4, 64, dtype, seed), layout=layout)


def test_gated_delta_rule_at_the_qwen_shape():
    check_gated_delta(*gated_delta_inputs(1, 2, 32, 128, 32, 128, torch.float32, 5))


@pytest.mark.parametrize("case, words", [
    ("dk", ("q's Dk = 48 is not a multiple of 32",)),
    ("no_kernel", ("(Dk, Dv, Hk, Hv) = (32, 64, 4, 4) has no Metal kernel",)),
    ("gqa_no_kernel", ("(64, 64, 2, 4) has no Metal kernel",)),
    ("float16", ("q has dtype float16",)),
    ("state_dtype", ("state is bfloat16",)),
    ("g_shape", ("g must be [B, T, Hv] = [1, 2, 4]",)),
    ("state_shape", ("state must be [B, Hv, Dv, Dk] = [1, 4, 64, 64]",)),
    ("k_shape", ("k must be [B, T, Hk, Dk] like q",)),
    ("rank", ("v must be 4-D",)),
])
def test_gated_delta_rule_refuses_what_upstream_refuses(case, words):
    q, k, v, g, beta, state = gated_delta_inputs(1, 2, 4, 64, 4, 64, torch.float32, 0)
    if case == "dk":
        q, k, state = q[..., :48], k[..., :48], state[..., :48]
    elif case == "no_kernel":
        q, k, state = q[..., :32], k[..., :32], state[..., :32]
    elif case == "gqa_no_kernel":
        q, k = q[:, :, :2], k[:, :, :2]
    elif case == "float16":
        q, k, v, g, beta, state = (t.half() for t in (q, k, v, g, beta, state))
    elif case == "state_dtype":
        state = state.bfloat16()
    elif case == "g_shape":
        g = g[..., :2]
    elif case == "state_shape":
        state = state[:, :2]
    elif case == "k_shape":
        k = k[:, :1]
    elif case == "rank":
        v = v[0]
    before = state.clone()
    status, result = gated_delta_call(q, k, v, g, beta, state)
    assert_fails(status, "aoti_torch_mps_gated_delta_rule: ", *words)
    assert result.value is None and torch.equal(state, before)
