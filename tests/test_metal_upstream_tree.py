"""ExecuTorch's own Metal runtime, built from its source tree, against shimkit's stand-in (issue 67, parts 4 and 5).

Runs where a tree is given: ``SHIMKIT_METAL_RUNTIME=<an ExecuTorch tree>`` (``backends/apple/metal`` and
``backends/aoti`` of the commit the stand-in follows, cff6f4dd32e6, are enough). It builds upstream's runtime with
shimkit.objc (:mod:`shimkit.runtime.upstream`), checks the build report, and drives each upstream fallback shim and
the stand-in's fallback of the same symbol (runtime/native/fallbacks, over libtorch's tensors, as
tests/fallback_helpers.py drives it) with the same operands: every dtype upstream accepts, contiguous and strided,
edge sizes. Each result is

* ``equal``: the same bits (NaN where NaN; topK's values and indices must be this),
* ``within bound``: both within ``2 * (terms * 2**-24 * magnitude) + 2 * u * magnitude`` of each other, where
  ``magnitude`` is the float64 sum of the terms' absolute values (the product's, or for attention the weighted
  values') and ``u`` the unit roundoff of the dtype: each side's float32 accumulation error and one rounding to
  the dtype, where MPSGraph (upstream) and the stand-in's loops may sum in different orders,
* ``both refuse`` (the same call refused by both; the messages are recorded), or ``DIFFERENT``, which fails the
  test naming the shim, dtype, shapes and the largest difference.

``SHIMKIT_UPSTREAM_RESULTS=<file>`` writes every result as a markdown table there (docs/metal.md records it).
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fallback_helpers import SIGNATURES, call, int_array, last_error, library, optional, steal
from shimkit.objc.build import sanitizer_environment, toolchain
from shimkit.runtime.program import DTYPE_CODES, load_runtime, take_failure
from shimkit.runtime.upstream import UpstreamBuildError, build_upstream_runtime, upstream_sources
from shimkit.store import KEY_CHARS, default_store, digest_of
from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles

TREE_VARIABLE = "SHIMKIT_METAL_RUNTIME"
TREE = os.environ.get(TREE_VARIABLE, "")
NO_TREE = (f"no ExecuTorch tree given: set {TREE_VARIABLE} to one (backends/apple/metal and backends/aoti of commit "
           f"cff6f4dd32e6, the commit the stand-in follows)")

H, I64, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
RESULTS: list[tuple[str, str, str, str, str]] = []
# What shimkit.metal cannot compile (docs/metal.md "What is not emulated"): upstream's kernels that use it cannot run
# here, and are recorded as such.
NOT_EMULATED = "are not supported by shimkit.metal"
# et_metal.mm caches a library that failed to compile and answers "Library not compiled" from then on.
LIBRARY_MISSING = "Library not compiled"
UNRUNNABLE: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def record_results():
    """Writes every comparison as a markdown table to ``$SHIMKIT_UPSTREAM_RESULTS``, where given, once the module's
    tests ran."""
    yield
    destination = os.environ.get("SHIMKIT_UPSTREAM_RESULTS")
    if destination and RESULTS:
        lines = ["| shim | dtype | operands | result | detail |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| `{shim}` | {dtype} | {shapes} | {verdict} | {detail.replace('|', '/')} |"
                  for shim, dtype, shapes, verdict, detail in RESULTS]
        Path(destination).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tree() -> Path:
    if not TREE:
        pytest.skip(NO_TREE)
    return Path(TREE).resolve()


@pytest.fixture(scope="module")
def build(tree):
    return build_upstream_runtime(tree)


@pytest.fixture(scope="module")
def upstream(build):
    library()  # the stand-in's fallbacks, built before the first comparison
    return Upstream(build.library)


def test_a_folder_that_is_no_tree_is_named(tmp_path):
    with pytest.raises(UpstreamBuildError, match=f"{tmp_path} is not an ExecuTorch source tree"):
        build_upstream_runtime(tmp_path)
    (tmp_path / "backends/apple/metal/runtime").mkdir(parents=True)
    with pytest.raises(UpstreamBuildError, match="lacks .*backends/aoti/common_shims.cpp"):
        build_upstream_runtime(tmp_path)


def test_a_source_that_does_not_compile_is_left_out_and_reported(tree):
    """The tree's files, linked (not copied) into a tree of their own, with one more source that does not compile.
    The tree's place is the same from run to run (the store's), so that its objects are built once."""
    listing = [str(path) for path in upstream_sources(tree)]
    fake = default_store().checked_root() / "test-upstream-tree" / digest_of([str(tree), *listing])[:KEY_CHARS]
    if not fake.is_dir():
        staging = fake.with_name(f"{fake.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "backends/apple").mkdir(parents=True)
        (staging / "backends/aoti").symlink_to(tree / "backends/aoti")
        runtime = staging / "backends/apple/metal/runtime"
        shutil.copytree(tree / "backends/apple/metal/runtime", runtime, copy_function=os.symlink)
        (runtime / "ops/op_broken.mm").write_text("// not upstream's: a source that does not compile\nint broken = ;\n")
        os.replace(staging, fake)
    build = build_upstream_runtime(fake)
    broken = {source.path: source for source in build.sources}["backends/apple/metal/runtime/ops/op_broken.mm"]
    assert not broken.built and "op_broken.mm:2:" in broken.reason and "error:" in broken.reason, broken
    assert [source.path for source in build.not_built] == [broken.path]
    assert "| `backends/apple/metal/runtime/ops/op_broken.mm` | NO | " in build.report()
    assert build.library.is_file()


def test_every_upstream_source_builds(tree, build):
    assert [source.path for source in build.sources] == [str(p) for p in upstream_sources(tree)]
    assert not build.not_built, "upstream sources that did not build:\n" + build.report()


def test_the_library_has_what_a_program_needs(build, upstream):
    """The hooks shimkit.runtime.program loads, and the c-shims the stand-in also exports, from upstream's code."""
    assert upstream.lib.aoti_torch_device_type_mps() == 13  # torch's c10::DeviceType::MPS
    for name in SIGNATURES:
        if name != "aoti_torch_mps_addmm_out":  # shimkit's plugin, not upstream's
            getattr(upstream.lib, name)


def test_msl_runs_through_upstreams_et_metal(upstream):
    """aoti_torch_mps_create_shader_library ... dispatch: et_metal.mm over shimkit.objc's Metal and shimkit.metal."""
    lib = upstream.lib
    live = lib.shimkit_runtime_live_tensors()
    source = b"kernel void twice(device float* x [[buffer(0)]], constant int64_t& n [[buffer(1)]], " \
             b"uint i [[thread_position_in_grid]]) { if (i < n) x[i] = 2 * x[i] + 1; }"
    library_handle, kernel = H(), H()
    assert lib.aoti_torch_mps_create_shader_library(source, ctypes.byref(library_handle)) == 0, take_failure(lib)
    assert lib.aoti_torch_mps_get_kernel_function(library_handle, b"twice", ctypes.byref(kernel)) == 0
    values = torch.arange(5000, dtype=torch.float32)  # over 4 KiB: et_metal.mm binds its Metal buffer
    handle, keep = upstream.handle(values)
    assert lib.aoti_torch_mps_start_encoding(kernel) == 0
    assert lib.aoti_torch_mps_set_arg_tensor(kernel, 0, handle) == 0
    assert lib.aoti_torch_mps_set_arg_int(kernel, 1, values.numel()) == 0
    assert lib.aoti_torch_mps_dispatch_single(kernel, values.numel()) == 0
    assert lib.shimkit_runtime_synchronize() == 0, take_failure(lib)
    assert torch.equal(upstream.tensor(handle), values * 2 + 1)
    upstream.delete(handle, *keep)
    assert lib.aoti_torch_mps_get_kernel_function(library_handle, b"absent", ctypes.byref(kernel)) != 0
    assert "absent" in take_failure(lib)  # upstream's ET_LOG(Error, ...), captured
    assert lib.aoti_torch_mps_delete_shader_library(library_handle) == 0
    assert lib.shimkit_runtime_live_tensors() == live


# Upstream's shims in a process of their own, with upstream's library and shimkit.objc built with ASan and UBSan
# (clang's, preloaded; the interpreter is not instrumented and its leaks are by design, so leak detection is off).
# The stand-in's fallbacks are not loaded there (they are built with g++'s sanitizers, a second ASan runtime), so
# each result is checked against torch.
_SANITIZED_DRIVER = """
import ctypes, os, sys
from pathlib import Path
import torch
import torch.nn.functional as F
import test_metal_upstream_tree as t

u = t.Upstream(Path(os.environ["UPSTREAM_LIBRARY"]))
a, b = torch.randn(17, 33), t.transposed(torch.randn(33, 9))
status, (out,), failure = u.run("aoti_torch_mps_mm_out", [torch.empty(17, 9), a, b], lambda h, _: h, -1)
assert status == 0 and torch.allclose(out, a @ b, atol=1e-5), failure
x, w, bias = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
status, (out,), failure = u.run("aoti_torch_mps_convolution", [x, w, bias], lambda h, r: [
    h[0], h[1], t.optional(h[2]), t.int_array([1, 1]), 2, t.int_array([0, 0]), 2, t.int_array([1, 1]), 2, 0,
    t.int_array([0, 0]), 2, 1, ctypes.byref(r[0])], 1)
assert status == 0 and torch.allclose(out, F.conv2d(x, w) + bias, atol=1e-4), failure  # bias on the last dim
s = torch.randn(8, 16)
status, (values, indices), failure = u.run("aoti_torch_mps_topk", [s], lambda h, r: [
    h[0], 4, 1, 1, 1, ctypes.byref(r[0]), ctypes.byref(r[1])], 2)
assert status == 0 and torch.equal(values, s.topk(4).values) and torch.equal(indices.long(), s.topk(4).indices)
q, k, v = torch.randn(1, 2, 4, 64), torch.randn(1, 2, 6, 64), torch.randn(1, 2, 6, 64)
status, (out, _), failure = u.run("aoti_torch_mps__scaled_dot_product_attention_math_for_mps", [q, k, v],
    lambda h, r: [h[0], h[1], h[2], t.optional(None), 0.0, 0, t.optional(None), None, ctypes.byref(r[0]),
                  ctypes.byref(r[1])], 2)
assert status == 0 and torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5), failure
codes = torch.randint(0, 16, (2, 4, 64), dtype=torch.uint8)
scales, biases = torch.rand(2, 4, 2) * 0.2 + 0.01, torch.randn(2, 4, 2)
xq, experts = torch.randn(3, 64), torch.tensor([1, 0, 1], dtype=torch.int32)
status, (out,), failure = u.run("aoti_torch_mps_gather_qmv", [xq, t.packed_nibbles(codes), scales, biases, experts],
                                lambda h, r: [*h, 32, ctypes.byref(r[0])], 1)
weights = (codes.double() * scales.double().repeat_interleave(32, -1) + biases.double().repeat_interleave(32, -1))
assert status == 0 and torch.allclose(out.double(), (weights[experts.long()] * xq.double()[:, None]).sum(-1),
                                      atol=1e-4), failure
print("clean", u.lib.shimkit_runtime_live_tensors())
"""


def test_upstream_shims_run_clean_under_asan_and_ubsan(tree, monkeypatch):
    monkeypatch.setenv("SHIMKIT_SANITIZE", "1")
    sanitized = build_upstream_runtime(tree).library
    monkeypatch.delenv("SHIMKIT_SANITIZE")  # shimkit.metal's kernels: g++'s sanitizers would be a second runtime
    runtime = subprocess.run([toolchain().cxx, "-print-file-name=libclang_rt.asan-x86_64.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    environment = sanitizer_environment()
    environment.update(LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_odr_violation=0",
                       UPSTREAM_LIBRARY=str(sanitized), PYTHONPATH=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", _SANITIZED_DRIVER], capture_output=True, text=True, env=environment,
                          timeout=600)
    assert done.returncode == 0 and "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, \
        done.stdout[-3000:] + done.stderr[-6000:]
    assert done.stdout.split()[-2:] == ["clean", "0"]


class UpstreamRefused(Exception):
    """Upstream's runtime refused to make a tensor of an operand."""


def test_a_packed_view_at_an_offset_gets_a_no_copy_buffer_at_its_first_byte(upstream):
    base = torch.arange(8, dtype=torch.float32)
    view, owned = upstream.handle(base[4:])
    try:
        assert torch.equal(upstream.tensor(view), base[4:])
    finally:
        for handle in (view, *owned):
            upstream.delete(handle)


class Upstream:
    """Upstream's runtime, loaded as shimkit.runtime.program loads a runtime, and its tensors mirrored from torch's."""

    def __init__(self, path: Path) -> None:
        self.lib = lib = load_runtime(path)
        for name, argtypes in SIGNATURES.items():
            if hasattr(lib, name):
                getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, I32
        lib.aoti_torch_empty_strided.argtypes = [I64, ctypes.POINTER(I64), ctypes.POINTER(I64), I32, I32, I32,
                                                 ctypes.POINTER(H)]
        lib.aoti_torch__reinterpret_tensor.argtypes = [H, I64, ctypes.POINTER(I64), ctypes.POINTER(I64), I64,
                                                       ctypes.POINTER(H)]
        lib.aoti_torch_mps_create_shader_library.argtypes = [ctypes.c_char_p, ctypes.POINTER(H)]
        lib.aoti_torch_mps_delete_shader_library.argtypes = [H]
        lib.aoti_torch_mps_get_kernel_function.argtypes = [H, ctypes.c_char_p, ctypes.POINTER(H)]
        lib.aoti_torch_mps_start_encoding.argtypes = [H]
        lib.aoti_torch_mps_set_arg_tensor.argtypes = [H, ctypes.c_uint, H]
        lib.aoti_torch_mps_set_arg_int.argtypes = [H, ctypes.c_uint, I64]
        lib.aoti_torch_mps_dispatch_single.argtypes = [H, ctypes.c_uint64]
        lib.shimkit_runtime_synchronize.restype = I32
        lib.aoti_torch_get_storage_offset.argtypes = [H, ctypes.POINTER(I64)]
        self.mps = lib.aoti_torch_device_type_mps()

    def accepts(self, dtype: torch.dtype) -> bool:
        """Whether upstream makes tensors of ``dtype`` at all (its SupportedDTypes, shims/utils.cpp)."""
        handle = H()
        status = self.lib.aoti_torch_empty_strided(1, int_array([1]), int_array([1]), DTYPE_CODES[dtype], self.mps, 0,
                                                   ctypes.byref(handle))
        take_failure(self.lib)
        if status == 0:
            self.delete(handle)
        return status == 0

    def _empty(self, sizes, strides, dtype) -> H:
        handle = H()
        status = self.lib.aoti_torch_empty_strided(len(sizes), int_array(sizes), int_array(strides), DTYPE_CODES[dtype],
                                                   self.mps, 0, ctypes.byref(handle))
        if status != 0:
            raise UpstreamRefused(f"aoti_torch_empty_strided: {take_failure(self.lib)}")
        return handle

    def handle(self, tensor: torch.Tensor) -> tuple[H, list[H]]:
        """A tensor of upstream's holding ``tensor``'s values at its sizes, strides and storage offset (a view of a
        copy of its storage), and the handles to delete with it."""
        storage = tensor.untyped_storage()
        elements = storage.nbytes() // tensor.element_size()
        if tensor.is_contiguous() and tensor.storage_offset() == 0 and elements == tensor.numel() > 0:
            handle = self._empty(list(tensor.shape), list(tensor.stride()), tensor.dtype)
            self._write(handle, storage)
            return handle, []
        base = self._empty([max(elements, 1)], [1], tensor.dtype)  # a view of a copy of the whole storage
        self._write(base, storage)
        view = H()
        status = self.lib.aoti_torch__reinterpret_tensor(base, tensor.dim(), int_array(tensor.shape),
                                                         int_array(tensor.stride()), tensor.storage_offset(),
                                                         ctypes.byref(view))
        if status != 0:
            failure = take_failure(self.lib)
            # Upstream registers the view before it fails to map it, and cannot delete it then ("memory not found
            # during deletion"): that handle stays behind, upstream's leak on this path.
            self.delete(base)
            raise UpstreamRefused(f"aoti_torch__reinterpret_tensor: {failure}")
        return view, [base]

    def _write(self, handle: H, storage) -> None:
        pointer = ctypes.c_void_p()
        self.lib.aoti_torch_get_data_ptr(handle, ctypes.byref(pointer))
        ctypes.memmove(pointer.value, storage.data_ptr(), storage.nbytes())

    def tensor(self, handle: H) -> torch.Tensor:
        """A copy of upstream's tensor ``handle``."""
        rank, code = I64(), I32()
        sizes, strides = ctypes.POINTER(I64)(), ctypes.POINTER(I64)()
        pointer = ctypes.c_void_p()
        self.lib.aoti_torch_get_dim(handle, ctypes.byref(rank))
        self.lib.aoti_torch_get_sizes(handle, ctypes.byref(sizes))
        self.lib.aoti_torch_get_strides(handle, ctypes.byref(strides))
        self.lib.aoti_torch_get_dtype(handle, ctypes.byref(code))
        self.lib.aoti_torch_get_data_ptr(handle, ctypes.byref(pointer))
        shape, stride = [sizes[i] for i in range(rank.value)], [strides[i] for i in range(rank.value)]
        dtype = {c: d for d, c in DTYPE_CODES.items()}[code.value]
        if 0 in shape:
            return torch.empty(shape, dtype=dtype)
        span = 1 + sum((size - 1) * step for size, step in zip(shape, stride))
        raw = (ctypes.c_char * (span * torch.empty((), dtype=dtype).element_size())).from_address(pointer.value)
        return torch.frombuffer(bytearray(raw), dtype=dtype).as_strided(shape, stride).clone()

    def delete(self, *handles: H) -> None:
        for handle in handles:
            if handle:
                assert self.lib.aoti_torch_delete_tensor_object(handle) == 0, take_failure(self.lib)

    def run(self, name: str, inputs: list[torch.Tensor], arguments, outputs: int) -> tuple[int, list, str]:
        """Calls ``name`` with the handles of ``inputs`` (``arguments(handles, results)`` gives the call's
        arguments), waits for upstream's stream, and returns the status, copies of the ``outputs`` results (or of
        the inputs, for an ``out=`` shim, where ``outputs`` is negative: the first -outputs inputs) and the
        failure."""
        live = self.lib.shimkit_runtime_live_tensors()
        made = []
        try:
            for tensor in inputs:
                made.append(self.handle(tensor))
        except UpstreamRefused as refusal:
            self.delete(*(h for handle, keep in made for h in (handle, *keep)))
            return 1, [], str(refusal)
        handles = [handle.value for handle, _ in made]
        results = [H() for _ in range(max(outputs, 0))]
        take_failure(self.lib)
        status = getattr(self.lib, name)(*arguments(handles, results))
        synchronized = self.lib.shimkit_runtime_synchronize()
        failure = take_failure(self.lib)
        copies = []
        if status == 0 and synchronized == 0:
            copies = [self.tensor(h) for h in (results if outputs >= 0 else handles[:-outputs])]
        self.delete(*results, *handles, *(h for _, keep in made for h in keep))
        assert self.lib.shimkit_runtime_live_tensors() == live, f"{name}: upstream's tensors leaked"
        return (status or synchronized), copies, failure


def standin(name: str, inputs: list[torch.Tensor], arguments, outputs: int) -> tuple[int, list, str]:
    """The stand-in's fallback ``name``, called as :meth:`Upstream.run` calls upstream's."""
    results = [H() for _ in range(max(outputs, 0))]
    with tensor_handles(*inputs) as handles:
        status = call(name, *arguments(handles, results))
    if status != AOTI_TORCH_SUCCESS:
        return status, [], last_error()
    copies = [steal(r) for r in results] if outputs >= 0 else [t.clone() for t in inputs[:-outputs]]
    return status, copies, ""


# -- comparison --------------------------------------------------------------------------------------------------

def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        both_nan = a.isnan() & b.isnan()  # any NaN bits: MPSGraph's NaN payload is not Apple's to promise
        return bool((both_nan | (a.contiguous().view(torch.uint8).view(-1, a.element_size()) ==
                                 b.contiguous().view(torch.uint8).view(-1, a.element_size())).all(-1)
                     .view(a.shape)).all())
    return torch.equal(a, b)


def compare(shim: str, dtype: torch.dtype, shapes: str, up, stand, bound=None, known: str = "") -> None:
    """Records one comparison; ``bound`` (float64, elementwise, or None for bit-for-bit) is what the outputs may
    differ by. ``known``: why the two are expected to disagree on this call (a disagreement found and explained,
    recorded as such; it fails the test if they then agree, as the explanation would be wrong)."""
    up_status, up_out, up_failure = up
    stand_status, stand_out, stand_failure = stand
    dtype_name = str(dtype).removeprefix("torch.")
    if up_status or stand_status:
        verdict = "both refuse" if up_status and stand_status else "DIFFERENT"
        if up_status and (NOT_EMULATED in up_failure or shim in UNRUNNABLE and LIBRARY_MISSING in up_failure):
            UNRUNNABLE.add(shim)
            verdict = "upstream's MSL not runnable here"
        detail = f"upstream: {up_failure or 'ok'} / stand-in: {stand_failure or 'ok'}"
        RESULTS.append((shim, dtype_name, shapes, *explained(verdict, detail, known)))
        return
    worst, verdict = 0.0, "equal"
    for a, b in zip(up_out, stand_out):
        if bits_equal(a, b):
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            verdict, worst = "DIFFERENT", math.inf
            break
        diff = (a.double() - b.double()).abs()
        nan_a, nan_b = a.double().isnan(), b.double().isnan()
        same_specials = torch.equal(nan_a, nan_b) and torch.equal(a.double()[a.double().isinf()],
                                                                    b.double()[a.double().isinf()])
        finite = ~nan_a & ~a.double().isinf()
        worst = max(worst, float(diff[finite].max()) if finite.any() else 0.0)
        if bound is None or not same_specials:
            verdict = "DIFFERENT"
        elif bool((diff[finite] <= torch.as_tensor(bound, dtype=torch.float64).expand_as(diff)[finite]).all()):
            verdict = "within bound" if verdict == "equal" else verdict
        else:
            verdict = "DIFFERENT"
    RESULTS.append((shim, dtype_name, shapes,
                    *explained(verdict, f"max |difference| {worst:.3g}" if worst else "", known)))


def explained(verdict: str, detail: str, known: str) -> tuple[str, str]:
    if not known:
        return verdict, detail
    if verdict != "DIFFERENT":
        return "DIFFERENT", f"expected to differ ({known}), but {verdict}: {detail}"
    return "DIFFERENT (explained)", f"{detail}; {known}"


def product_bound(magnitude: torch.Tensor, terms: int, dtype: torch.dtype) -> torch.Tensor:
    return 2 * (terms * 2.0 ** -24 * magnitude) + 2 * UNIT_ROUNDOFF[dtype] * magnitude + 2 * torch.finfo(dtype).tiny


def random(shape, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(dtype)


def packed_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes in [0, 16) along the last dim packed two to a byte, the even element in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def transposed(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.mT.contiguous().mT


LAYOUTS = {"contiguous": lambda t: t, "transposed": transposed}


def dtypes(upstream: Upstream, shim: str):
    """The float dtypes upstream makes tensors of; one row for each it does not (float16: utils.cpp's
    SupportedDTypes has none)."""
    for dtype in FLOATS:
        if upstream.accepts(dtype):
            yield dtype
        else:
            RESULTS.append((shim, str(dtype).removeprefix("torch."), "any", "upstream has no tensors of this dtype",
                            "aoti_torch_empty_strided refuses it"))


def disagreements(shim: str) -> list[tuple]:
    return [row for row in RESULTS if row[0] == shim and row[3] == "DIFFERENT"]


# -- the shims ---------------------------------------------------------------------------------------------------

def test_mm_out(upstream):
    shim = "aoti_torch_mps_mm_out"
    for dtype in dtypes(upstream, shim):
        for seed, (m, k, n) in enumerate(((1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 128, 32), (2, 0, 3))):
            for layout_a, layout_b in (("contiguous", "contiguous"), ("contiguous", "transposed"),
                                       ("transposed", "contiguous"), ("transposed", "transposed")):
                a = LAYOUTS[layout_a](random((m, k), dtype, seed))
                b = LAYOUTS[layout_b](random((k, n), dtype, seed + 100))
                out = torch.full((m, n), math.nan, dtype=dtype)

                def arguments(handles, _):
                    return handles

                up = upstream.run(shim, [out, a, b], arguments, -1)
                stand = standin(shim, [out.clone(), a, b], arguments, -1)
                magnitude = a.double().abs() @ b.double().abs()
                compare(shim, dtype, f"[{m},{k}]{layout_a[0]} x [{k},{n}]{layout_b[0]}", up, stand,
                        product_bound(magnitude, k, dtype))
    assert not disagreements(shim), disagreements(shim)


def test_bmm_out(upstream):
    shim = "aoti_torch_mps_bmm_out"
    for dtype in dtypes(upstream, shim):
        for seed, (batch, m, k, n) in enumerate(((1, 1, 1, 1), (2, 3, 5, 4), (3, 8, 16, 5), (2, 1, 64, 1))):
            for layout in ("contiguous", "transposed"):
                a = random((batch, m, k), dtype, seed)
                b = LAYOUTS[layout](random((batch, k, n), dtype, seed + 100))
                out = torch.full((batch, m, n), math.nan, dtype=dtype)
                up = upstream.run(shim, [out, a, b], lambda handles, _: handles, -1)
                stand = standin(shim, [out.clone(), a, b], lambda handles, _: handles, -1)
                magnitude = a.double().abs() @ b.double().abs()
                compare(shim, dtype, f"[{batch},{m},{k}] x [{batch},{k},{n}]{layout[0]}", up, stand,
                        product_bound(magnitude, k, dtype))
    assert not disagreements(shim), disagreements(shim)


CONVOLUTIONS = (  # input shape, weight shape, stride, padding, dilation, groups, bias
    ((1, 3, 8, 8), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    ((2, 4, 7, 5), (6, 2, 3, 2), [2, 1], [0, 1], [1, 2], 2, False),
    ((1, 2, 5, 5), (2, 1, 1, 1), [1, 1], [0, 0], [1, 1], 2, False),
    ((2, 3, 6, 6), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1], 1, True),  # 4 output channels, 4 columns: the bias adds
    ((2, 3, 9), (5, 3, 3), [2], [1], [1], 1, True),  # a 1-D convolution
)


def test_convolution(upstream):
    shim = "aoti_torch_mps_convolution"
    for dtype in dtypes(upstream, shim):
        for seed, (input_shape, weight_shape, stride, padding, dilation, groups, has_bias) in enumerate(CONVOLUTIONS):
            for layout in ("contiguous", "transposed"):
                input_ = LAYOUTS[layout](random(input_shape, dtype, seed))
                weight = random(weight_shape, dtype, seed + 100)
                bias = random((weight_shape[0],), dtype, seed + 200) if has_bias else None
                inputs = [input_, weight] + ([bias] if has_bias else [])

                def arguments(handles, results):
                    return [handles[0], handles[1], optional(handles[2] if has_bias else None), int_array(stride),
                            len(stride), int_array(padding), len(padding), int_array(dilation), len(dilation), 0,
                            int_array([0] * len(stride)), len(stride), groups, ctypes.byref(results[0])]

                up = upstream.run(shim, inputs, arguments, 1)
                stand = standin(shim, inputs, arguments, 1)
                dense = input_.contiguous()
                magnitude = torch.convolution(dense.double().abs(), weight.double().abs(),
                                              bias.double().abs() if has_bias else None, stride, padding, dilation,
                                              False, [0] * len(stride), groups)
                terms = weight[0].numel() + 1
                compare(shim, dtype, f"input {list(input_shape)}{layout[0]} weight {list(weight_shape)} "
                                     f"stride {stride} padding {padding} dilation {dilation} groups {groups}"
                                     f"{' bias' if has_bias else ''}", up, stand,
                        product_bound(magnitude, terms, dtype))
    assert not disagreements(shim), disagreements(shim)


SDPA_CASES = (  # batch, heads, kv heads, query length, key length, head dim, mask, scale
    (1, 2, 2, 4, 6, 64, "none", None),
    (2, 2, 2, 3, 5, 64, "causal", None),
    (1, 4, 4, 5, 5, 64, "full", 0.3),
    (1, 1, 1, 1, 7, 96, "none", None),
)


def test_scaled_dot_product_attention(upstream):
    shim = "aoti_torch_mps__scaled_dot_product_attention_math_for_mps"
    for dtype in dtypes(upstream, shim):
        for seed, (batch, heads, kv_heads, q_length, kv_length, head_dim, mask_kind, scale) in enumerate(SDPA_CASES):
            for layout in ("contiguous", "bshd"):
                query = random((batch, heads, q_length, head_dim), dtype, seed)
                key = random((batch, kv_heads, kv_length, head_dim), dtype, seed + 1)
                value = random((batch, kv_heads, kv_length, head_dim), dtype, seed + 2)
                if layout == "bshd":  # [B, S, H, D] memory, as a model's projections leave it
                    query, key, value = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (query, key, value))
                inputs = [query, key, value]
                if mask_kind == "full":
                    mask = random((batch, heads, q_length, kv_length), dtype, seed + 3)
                    inputs.append(mask.masked_fill(torch.rand(mask.shape, generator=torch.Generator().manual_seed(
                        seed)) < 0.3, -math.inf))

                def arguments(handles, results):
                    return [handles[0], handles[1], handles[2], optional(handles[3] if len(handles) > 3 else None),
                            0.0, int(mask_kind == "causal"), optional(None),
                            ctypes.byref(ctypes.c_double(scale)) if scale is not None else None,
                            ctypes.byref(results[0]), ctypes.byref(results[1])]

                up = upstream.run(shim, inputs, arguments, 2)
                stand = standin(shim, inputs, arguments, 2)
                # The attention weights (ret1) are allocated and never written by either: only the output compares.
                up, stand = (up[0], up[1][:1], up[2]), (stand[0], stand[1][:1], stand[2])
                factor = scale if scale is not None else 1 / math.sqrt(head_dim)
                largest_score = factor * float(query.double().abs().amax() * key.double().abs().amax()) * head_dim
                magnitude = value.double().abs().amax() * torch.ones((batch, heads, q_length, head_dim),
                                                                      dtype=torch.float64)
                compare(shim, dtype, f"q [{batch},{heads},{q_length},{head_dim}] kv [{batch},{kv_heads},{kv_length}]"
                                     f" {mask_kind} {layout}", up, stand,
                        product_bound(magnitude * (1 + largest_score), head_dim + kv_length + 8, dtype))
    assert not disagreements(shim), disagreements(shim)


def test_topk(upstream):
    shim = "aoti_torch_mps_topk"
    for dtype in dtypes(upstream, shim):
        for seed, (shape, k, dim) in enumerate((((10,), 3, 0), ((4, 9), 4, 1), ((6, 5), 6, 0), ((3, 1), 1, 1),
                                               ((8, 16), 16, -1))):
            for largest in (True, False):
                for layout in ("contiguous", "transposed"):
                    self_ = random(shape, dtype, seed)
                    self_.view(-1)[::3] = self_.view(-1)[0]  # ties
                    self_ = LAYOUTS[layout](self_) if self_.dim() > 1 else self_

                    def arguments(handles, results):
                        return [handles[0], k, dim, int(largest), 1, ctypes.byref(results[0]),
                                ctypes.byref(results[1])]

                    up = upstream.run(shim, [self_], arguments, 2)
                    stand = standin(shim, [self_], arguments, 2)
                    compare(shim, dtype, f"{list(shape)}{layout[0]} k={k} dim={dim} "
                                         f"{'largest' if largest else 'smallest'}", up, stand)
    assert not disagreements(shim), disagreements(shim)


def test_linear_4bit(upstream):
    shim = "aoti_torch_mps__linear_fp_act_4bit_weight"
    for dtype in dtypes(upstream, shim):
        for seed, (m, n, group_size, groups) in enumerate(((1, 4, 32, 1), (3, 8, 64, 2), (5, 12, 128, 1),
                                                           (1, 3, 32, 2))):
            k = group_size * groups
            generator = torch.Generator().manual_seed(seed)
            codes = torch.randint(0, 16, (n, k), generator=generator, dtype=torch.uint8)
            a = random((m, k), dtype, seed)
            scales = (torch.rand(n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
            zeros = random((n, groups), dtype, seed + 1, scale=0.5)
            inputs = [a, packed_nibbles(codes), scales, zeros]

            def arguments(handles, results):
                return [handles[0], handles[1], group_size, handles[2], handles[3], ctypes.byref(results[0])]

            up = upstream.run(shim, inputs, arguments, 1)
            stand = standin(shim, inputs, arguments, 1)
            weight = (codes.double() * scales.double().repeat_interleave(group_size, -1)
                      + zeros.double().repeat_interleave(group_size, -1))
            magnitude = a.double().abs() @ weight.abs().t()
            compare(shim, dtype, f"A [{m},{k}] B [{n},{k}] group {group_size}", up, stand,
                    product_bound(magnitude, k + 4, dtype))
    assert not disagreements(shim), disagreements(shim)


def test_gather_qmv(upstream):
    shim = "aoti_torch_mps_gather_qmv"
    for dtype in dtypes(upstream, shim):
        for seed, (pairs, experts, n, group_size, groups) in enumerate(((1, 1, 1, 32, 1), (3, 2, 4, 64, 2),
                                                                        (4, 3, 5, 128, 1), (0, 2, 3, 32, 1),
                                                                        (2, 2, 8, 128, 4), (3, 2, 7, 32, 1))):
            k = group_size * groups
            generator = torch.Generator().manual_seed(seed)
            codes = torch.randint(0, 16, (experts, n, k), generator=generator, dtype=torch.uint8)
            scales = (torch.rand(experts, n, groups, generator=generator, dtype=torch.float64) * 0.2 + 0.01).to(dtype)
            biases = random((experts, n, groups), dtype, seed + 1, scale=0.5)
            indices = torch.randint(0, experts, (pairs,), generator=generator, dtype=torch.int32)
            x = random((pairs, k), dtype, seed + 2)
            inputs = [x, packed_nibbles(codes), scales, biases, indices]

            def arguments(handles, results):
                return [*handles, group_size, ctypes.byref(results[0])]

            up = upstream.run(shim, inputs, arguments, 1)
            stand = standin(shim, inputs, arguments, 1)
            known = ""
            if 4 < n < 8:
                known = ("upstream's gather_qmv_impl, for 4 < N < 8, has simdgroup 0 accumulate rows 0..N-1 into its "
                         "4-element result[] (op_gather_qmv.mm, the small-N path): rows 4.. are read and written past "
                         "the array, and race with simdgroup 1's writes of the same rows; undefined on a Mac too")
            weights = (codes.double() * scales.double().repeat_interleave(group_size, -1)
                       + biases.double().repeat_interleave(group_size, -1))[indices.long()]
            magnitude = (weights.abs() * x.double().abs().unsqueeze(1)).sum(-1)
            compare(shim, dtype, f"x [{pairs},{k}] w [{experts},{n},{k}] group {group_size}", up, stand,
                    product_bound(magnitude, k + 4, dtype), known)
    assert not disagreements(shim), disagreements(shim)


