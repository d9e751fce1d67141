"""Check the nonzero plugin's CUDA c-shim (plugins/nonzero/kernel/nonzero_shim_cuda.cu) on a GPU against
torch.nonzero, through libtorch's implementation of the same AOTI c-shim ABI that ExecuTorch's CUDA runtime has.

    python3 tools/cuda_nonzero_check.py RESULTS.json [--nvcc NVCC] [--arch sm_90] [--build-dir DIR]

1. Compiles the .cu with nvcc into a shared library linked against libtorch (libtorch, libtorch_cpu,
   libtorch_cuda, libc10, libc10_cuda) with ``-Wl,--no-undefined``, printing nvcc's command and, on failure,
   its whole output; then lists the ``aoti_torch_*`` functions the object calls and fails if one is not in
   ExecuTorch's CUDA runtime (the list below, from upstream's headers).
2. Loads it with ctypes and, for each input (every dtype the shim takes, 0-d to 6-d, empty dimensions,
   transposed, strided, offset and expanded views, mostly-zero masks, NaN and -0.0, a 1<<22-element tensor,
   and one past 2**31 elements when the GPU has room), hands the CUDA tensor over as an AtenTensorHandle
   (``torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors``), calls ``aoti_torch_cuda_nonzero`` and takes the
   result back (``torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs``); it must equal
   ``torch.nonzero`` exactly: int64, same shape, same values, same strides wherever a dimension has more than
   one element (ATen's CUDA nonzero returns strides (1, count), which Inductor's fake nonzero promises).
3. Unsupported inputs (complex64, a CPU tensor, 26 dimensions, a null handle) must return a non-zero error
   code, not crash.
4. Inside a program: models calling nonzero (its result returned, and consumed by the kernels after it) are
   compiled by AOTInductor for CUDA and run in a child process with the shim, wrapped in a call counter,
   LD_PRELOADed over libtorch's own aoti_torch_cuda_nonzero; they must match eager and the counter must
   show that the program called this shim (``--no-program`` skips this stage).

Writes every case to RESULTS.json and prints one summary line; exits 0 only if everything passed, 1 on any
mismatch or error, 2 if the shim did not build. Imports only torch and the standard library.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "plugins" / "nonzero" / "kernel" / "nonzero_shim_cuda.cu"

# The aoti_torch_* functions ExecuTorch's CUDA runtime defines (pytorch/executorch: backends/aoti/common_shims_slim.h,
# backends/cuda/runtime/shims/memory.h, cuda_guard.h, tensor_attribute.h), as far as a shim may call them.
EXECUTORCH_CUDA_RUNTIME_API = frozenset({
    "aoti_torch_get_data_ptr", "aoti_torch_get_sizes", "aoti_torch_get_strides", "aoti_torch_get_dtype",
    "aoti_torch_get_dim", "aoti_torch_get_numel", "aoti_torch_layout_strided", "aoti_torch_get_storage_offset",
    "aoti_torch_get_storage_size", "aoti_torch_get_device_type", "aoti_torch_get_device_index",
    "aoti_torch_dtype_float32", "aoti_torch_dtype_bfloat16", "aoti_torch_dtype_float16", "aoti_torch_dtype_int64",
    "aoti_torch_dtype_int32", "aoti_torch_dtype_int16", "aoti_torch_dtype_int8", "aoti_torch_dtype_uint8",
    "aoti_torch_dtype_bool", "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda",
    "aoti_torch_grad_mode_is_enabled", "aoti_torch_grad_mode_set_enabled", "aoti_torch_check",
    "aoti_torch_create_tensor_from_blob", "aoti_torch_create_tensor_from_blob_v2", "aoti_torch_empty_strided",
    "aoti_torch_delete_tensor_object", "aoti_torch_new_tensor_handle", "aoti_torch_clone_preserve_strides",
    "aoti_torch_clone", "aoti_torch__reinterpret_tensor", "aoti_torch_copy_", "aoti_torch_item_bool",
    "aoti_torch_assign_tensors_out", "aoti_torch_warn", "aoti_torch_create_cuda_guard",
    "aoti_torch_delete_cuda_guard", "aoti_torch_cuda_guard_set_index", "aoti_torch_create_cuda_stream_guard",
    "aoti_torch_delete_cuda_stream_guard", "aoti_torch_get_current_cuda_stream",
})
SHIM = "aoti_torch_cuda_nonzero"


# -- build ------------------------------------------------------------------------------------------------------

def _nvcc(explicit: str | None) -> str:
    candidates = [explicit, shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")]
    for candidate in candidates:
        if candidate and os.path.exists(candidate):
            return candidate
    raise FileNotFoundError("nvcc not found (give --nvcc or put it on PATH)")


def _torch_paths(kind: str) -> list[str]:
    from torch.utils import cpp_extension

    function = getattr(cpp_extension, f"{kind}_paths")
    try:
        return list(function(device_type="cuda"))
    except TypeError:  # torch before device_type
        return list(function(cuda=True))
    except OSError:  # CUDA_HOME not found: torch's own folders (nvcc brings the CUDA headers and cudart itself)
        return list(function())


def build(nvcc: str, arch: str, build_dir: Path, source: Path = SOURCE,
          name: str = "libnonzero_shim_cuda.so") -> tuple[Path | None, dict[str, Any]]:
    """The shim compiled and linked against libtorch; (None, info) with nvcc's output when it does not build."""
    library = build_dir / name
    includes = _torch_paths("include")
    libraries = _torch_paths("library")
    code = arch.removeprefix("sm_")
    command = [nvcc, "-O2", "-std=c++17", f"-gencode=arch=compute_{code},code=sm_{code}", "-shared",
               "-Xcompiler", "-fPIC", "-Xcompiler", "-Wall", *(f"-I{path}" for path in includes),
               str(source), "-o", str(library), *(f"-L{path}" for path in libraries),
               *(f"-Xlinker=-rpath,{path}" for path in libraries), "-Xlinker=--no-as-needed",
               "-Xlinker=--no-undefined", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-lc10", "-lc10_cuda"]
    print("nvcc command:\n  " + " ".join(command), flush=True)
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    info: dict[str, Any] = {"command": command, "returncode": completed.returncode,
                            "seconds": round(time.perf_counter() - started, 2),
                            "output": (completed.stdout + completed.stderr).strip()}
    if completed.returncode != 0:
        print(f"nvcc FAILED (exit {completed.returncode}):\n{info['output']}", flush=True)
        return None, info
    if info["output"]:
        print(f"nvcc said:\n{info['output']}", flush=True)
    called = _undefined_aoti_symbols(library)
    info["aoti_functions_called"] = called
    info["not_in_executorch_cuda_runtime"] = sorted(set(called) - EXECUTORCH_CUDA_RUNTIME_API) if called else None
    print(f"built {library} in {info['seconds']} s; it calls {', '.join(called) if called else '(nm unavailable)'}",
          flush=True)
    return library, info


def _undefined_aoti_symbols(library: Path) -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        return []
    listing = subprocess.run([nm, "-D", "--undefined-only", str(library)], capture_output=True, text=True).stdout
    return sorted({line.split()[-1].split("@")[0] for line in listing.splitlines()
                   if line.split() and line.split()[-1].startswith("aoti_torch_")})


# -- calling the shim -------------------------------------------------------------------------------------------

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def tensor_to_handle(tensor: torch.Tensor) -> Any:
    """A new AtenTensorHandle sharing ``tensor``'s storage, sizes, strides and offset (torch returns it as an
    unnamed capsule); give it back to :func:`handle_to_tensor`, which deletes it."""
    return torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors([tensor])[0]


def handle_address(handle: Any) -> int:
    return handle if isinstance(handle, int) else int(_capsule_pointer(handle, None))


def handle_to_tensor(handle: Any) -> torch.Tensor:
    """The tensor of an AtenTensorHandle (an address or a capsule), the handle deleted."""
    steal = torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs
    if isinstance(handle, int):
        try:
            return steal([_new_capsule(handle, None, None)])[0]
        except TypeError:  # a torch whose binding takes addresses
            return steal([handle])[0]
    return steal([handle])[0]


class Shim:
    def __init__(self, library: Path) -> None:
        self.library = ctypes.CDLL(str(library))
        self.function = self.library[SHIM]
        self.function.restype = ctypes.c_int32
        self.function.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]

    def __call__(self, tensor: torch.Tensor | None) -> tuple[int, torch.Tensor | None]:
        """(error code, result): the tensor handed over as a new AtenTensorHandle, freed after the call."""
        handle = tensor_to_handle(tensor) if tensor is not None else None
        result = ctypes.c_void_p(None)
        try:
            code = int(self.function(handle_address(handle) if handle is not None else None, ctypes.byref(result)))
        finally:
            if handle is not None:  # taken back, which deletes the handle
                handle_to_tensor(handle)
        if code != 0 or not result.value:
            if result.value:
                handle_to_tensor(result.value)
            return code, None
        return code, handle_to_tensor(result.value)


def _mismatch(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    if got.dtype != torch.int64:
        return f"dtype {got.dtype}, expected int64"
    if got.device != expected.device:
        return f"on {got.device}, expected {expected.device}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    for d in range(got.dim()):
        if got.shape[d] > 1 and got.stride(d) != expected.stride(d):
            return f"strides {got.stride()}, expected {expected.stride()} (torch.nonzero's)"
    if not torch.equal(got, expected):
        rows = (got != expected).any(dim=1).nonzero().flatten()
        first = int(rows[0])
        return (f"{rows.numel()} of {got.shape[0]} rows differ; first row {first}: {got[first].tolist()}, "
                f"expected {expected[first].tolist()}")
    return None


# -- inputs -----------------------------------------------------------------------------------------------------

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool)
SHAPES = ((), (0,), (1,), (7,), (3, 5), (0, 4), (4, 0), (2, 0, 3), (2, 3, 4), (1, 1, 1), (2, 3, 4, 5),
          (3, 1, 4, 1, 2), (2, 1, 3, 1, 2, 2), (33, 65), (4099,))


def _values(shape: tuple[int, ...], dtype: torch.dtype, density: float, generator: torch.Generator,
            specials: bool = True) -> torch.Tensor:
    """Random values of ``shape`` on the GPU, nonzero with probability ``density``; floating point ones with
    NaN, inf and -0.0 among them."""
    keep = torch.rand(shape, generator=generator) < density
    if dtype == torch.bool:
        return keep.cuda()
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=generator) * 3
        if specials and values.numel():
            choice = torch.rand(shape, generator=generator)
            values = torch.where(choice < 0.05, torch.tensor(float("nan")), values)
            values = torch.where((choice >= 0.05) & (choice < 0.08), torch.tensor(float("inf")), values)
            values = torch.where((choice >= 0.08) & (choice < 0.11), torch.tensor(-float("inf")), values)
        zeros = torch.where(torch.rand(shape, generator=generator) < 0.5, torch.tensor(-0.0), torch.tensor(0.0))
        return torch.where(keep, values, zeros).to(dtype).cuda()
    info = torch.iinfo(dtype)
    values = torch.randint(max(info.min, -100), min(info.max, 100) + 1, shape, generator=generator, dtype=torch.int64)
    values = torch.where(values == 0, torch.ones_like(values), values)
    return torch.where(keep, values, torch.zeros_like(values)).to(dtype).cuda()


def _views(base: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Non-contiguous views of ``base`` (which has at least 2 dimensions or is 1-D)."""
    views = []
    if base.dim() >= 2:
        views.append(("transposed", base.transpose(0, -1)))
        views.append(("permuted", base.permute(*reversed(range(base.dim())))))
        views.append(("sliced", base[..., ::2]))
        views.append(("offset", base[1:] if base.shape[0] > 1 else base[:, 1:]))
        if base.shape[0] >= 1:
            views.append(("expanded", base[:1].expand(3, *base.shape[1:])))
    elif base.dim() == 1:
        views.append(("strided", base[1::3]))
        views.append(("reversed-offset", base[2:]))
        views.append(("expanded", base[:1].expand(base.shape[0])))
    return views


def cases(generator: torch.Generator) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    found: list[tuple[str, Callable[[], torch.Tensor]]] = []

    def add(name: str, make: Callable[[], torch.Tensor]) -> None:
        found.append((name, make))

    for dtype in DTYPES:
        short = str(dtype).removeprefix("torch.")
        for shape in SHAPES:
            for density in (0.1, 0.9):
                base = _values(shape, dtype, density, generator)
                add(f"{short} {list(shape)} density {density}", lambda base=base: base)
                if density == 0.1:
                    for view_name, view in _views(base):
                        add(f"{short} {list(shape)} {view_name} {list(view.shape)} strides {list(view.stride())}",
                            lambda view=view: view)
        add(f"{short} all zeros [5, 6]", lambda dtype=dtype: torch.zeros(5, 6, dtype=dtype, device="cuda"))
        add(f"{short} all nonzero [5, 6]", lambda dtype=dtype: torch.ones(5, 6, dtype=dtype, device="cuda"))
        for value in (0, 1) + ((float("nan"), -0.0, float("inf")) if dtype.is_floating_point else ()):
            add(f"{short} 0-d {value}", lambda dtype=dtype, value=value: torch.tensor(value, dtype=dtype, device="cuda"))
        if dtype.is_floating_point:
            add(f"{short} signed zeros and NaN [2, 3]", lambda dtype=dtype: torch.tensor(
                [[0.0, -0.0, float("nan")], [1.0, 0.0, -float("inf")]], dtype=dtype, device="cuda"))
        large = _values((1 << 22,), dtype, 0.01, generator, specials=False)
        add(f"{short} 1<<22 mostly zeros", lambda large=large: large)
        add(f"{short} 1<<22 as [2048, 2048] transposed", lambda large=large: large.view(2048, 2048).t())
    dense = _values((1 << 22,), torch.float32, 0.97, generator)
    add("float32 1<<22 dense", lambda: dense)
    add("float32 1<<22 as [64, 256, 256] dense", lambda: dense.view(64, 256, 256))
    add("float32 [1<<22 + 7] mostly zeros", lambda: _values(((1 << 22) + 7,), torch.float32, 0.001, generator))
    return found


def failure_cases() -> list[tuple[str, Callable[[], torch.Tensor | None]]]:
    return [
        ("complex64 (not supported)", lambda: torch.ones(3, dtype=torch.complex64, device="cuda")),
        ("a CPU tensor", lambda: torch.ones(3)),
        ("26 dimensions (ATen's CUDA limit is 25)", lambda: torch.ones([1] * 26, device="cuda")),
        ("a null handle", lambda: None),
    ]


# -- inside an AOTInductor program ------------------------------------------------------------------------------

COUNTER = "shimkit_nonzero_calls"


def build_counted(nvcc: str, arch: str, build_dir: Path) -> tuple[Path | None, dict[str, Any]]:
    """The shim again, its entry point wrapped in a call counter (``shimkit_nonzero_calls``), for LD_PRELOAD."""
    wrapper = build_dir / "nonzero_shim_cuda_counted.cu"
    wrapper.write_text(
        "// Generated by tools/cuda_nonzero_check.py: the shim, each call of its entry point counted.\n"
        "#define aoti_torch_cuda_nonzero shimkit_uncounted_nonzero\n"
        f'#include "{SOURCE}"\n'
        "#undef aoti_torch_cuda_nonzero\n"
        f'extern "C" {{ SHIMKIT_EXPORT int64_t {COUNTER} = 0; }}\n'
        'extern "C" SHIMKIT_EXPORT AOTITorchError aoti_torch_cuda_nonzero(AtenTensorHandle self, '
        "AtenTensorHandle* ret0) {\n"
        f"  ++{COUNTER};\n"
        "  return shimkit_uncounted_nonzero(self, ret0);\n"
        "}\n")
    return build(nvcc, arch, build_dir, source=wrapper, name="libnonzero_shim_cuda_counted.so")


class _NonzeroReturned(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, 0).nonzero()


class _NonzeroConsumed(torch.nn.Module):
    """The coordinates read by the kernels after the call, with the strides Inductor assumes for them."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.nonzero(x > 0.5)
        return index * 3 + 1, x[index[:, 0], index[:, 1]] * 2, index.sum(0)


def program_stage(results: Path) -> int:
    """Run in the child process, with the counted shim preloaded."""
    counted = os.environ.get("SHIMKIT_COUNTED_SHIM", "")
    counter = ctypes.c_int64.in_dll(ctypes.CDLL(counted), COUNTER)
    outcomes = []
    generator = torch.Generator().manual_seed(3)
    models = [("where(x > 0, x, 0).nonzero()", _NonzeroReturned(), (6, 5)),
              ("nonzero consumed by later kernels", _NonzeroConsumed(), (33, 17))]
    for name, model, shape in models:
        entry: dict[str, Any] = {"case": f"AOTInductor program: {name}"}
        try:
            example = torch.randn(shape, generator=generator).cuda()
            exported = torch.export.export(model, (example,))
            package = torch._inductor.aoti_compile_and_package(
                exported, package_path=str(results.parent / f"program_{len(outcomes)}.pt2"))
            compiled = torch._inductor.aoti_load_package(package)
            before = counter.value
            checked = 0
            for trial in range(4):
                x = torch.randn(shape, generator=generator).cuda()
                if trial == 3:
                    x = torch.zeros(shape, device="cuda")  # no row at all
                expected = model(x)
                got = compiled(x)
                expected_list = [expected] if isinstance(expected, torch.Tensor) else list(expected)
                got_list = [got] if isinstance(got, torch.Tensor) else list(got)
                for e, g in zip(expected_list, got_list, strict=True):
                    if e.shape != g.shape or not torch.equal(e, g):
                        raise AssertionError(f"trial {trial}: {tuple(g.shape)} {g.flatten()[:8].tolist()} against "
                                             f"eager {tuple(e.shape)} {e.flatten()[:8].tolist()}")
                checked += 1
            calls = counter.value - before
            entry.update(ok=calls >= checked, calls=calls, runs=checked)
            if calls < checked:
                entry["error"] = (f"the program called this shim {calls} times in {checked} runs: it did not go "
                                  f"through aoti_torch_cuda_nonzero (or the preload did not take)")
        except Exception as error:
            entry.update(ok=False, error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        outcomes.append(entry)
        print(("ok  " if entry["ok"] else "FAIL ") + entry["case"] + (f": {entry['error']}" if not entry["ok"] else
                                                                      f" ({entry['calls']} calls)"), flush=True)
    results.write_text(json.dumps(outcomes, indent=2) + "\n")
    return 0


def run_program_stage(counted: Path, work: Path) -> list[dict[str, Any]]:
    results = work / "program_stage.json"
    environment = {**os.environ, "LD_PRELOAD": str(counted), "SHIMKIT_COUNTED_SHIM": str(counted)}
    command = [sys.executable, str(Path(__file__).resolve()), str(results), "--program-stage"]
    print("program stage: LD_PRELOAD=" + str(counted) + " " + " ".join(command), flush=True)
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)
    print(completed.stdout.strip(), flush=True)
    if completed.returncode != 0 or not results.exists():
        print(completed.stderr[-4000:], flush=True)
        return [{"case": "AOTInductor program stage", "ok": False,
                 "error": f"the child exited {completed.returncode}: {completed.stderr.strip()[-2000:]}"}]
    return json.loads(results.read_text())


# -- main -------------------------------------------------------------------------------------------------------

def run_cases(shim: Shim, generator: torch.Generator) -> list[dict[str, Any]]:
    results = []
    for name, make in cases(generator):
        entry: dict[str, Any] = {"case": name}
        try:
            tensor = make()
            entry.update(dtype=str(tensor.dtype), shape=list(tensor.shape), strides=list(tensor.stride()),
                         storage_offset=tensor.storage_offset())
            expected = torch.nonzero(tensor)
            code, got = shim(tensor)
            torch.cuda.synchronize()
            entry["count"] = int(expected.shape[0])
            if code != 0 or got is None:
                entry.update(ok=False, error=f"{SHIM} returned error code {code}")
            else:
                problem = _mismatch(got, expected)
                entry.update(ok=problem is None, result_strides=list(got.stride()))
                if problem:
                    entry["error"] = problem
        except Exception as error:  # a case that raised is a failure, and the rest still run
            entry.update(ok=False, error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        results.append(entry)
        if not entry["ok"]:
            print(f"FAIL {name}: {entry['error']}", flush=True)
    return results


def run_failures(shim: Shim) -> list[dict[str, Any]]:
    results = []
    for name, make in failure_cases():
        entry: dict[str, Any] = {"case": f"refuses {name}"}
        try:
            code, got = shim(make())
            entry.update(code=code, ok=code != 0 and got is None)
            if not entry["ok"]:
                entry["error"] = f"expected a non-zero error code, got {code}"
        except Exception as error:
            entry.update(ok=False, error=f"{type(error).__name__}: {error}")
        results.append(entry)
        if not entry["ok"]:
            print(f"FAIL {entry['case']}: {entry['error']}", flush=True)
    return results


def run_huge(shim: Shim) -> list[dict[str, Any]]:
    """One uint8 tensor past 2**31 elements (indices past int32), where the GPU has room for it."""
    numel = (1 << 31) + 4099
    free, _ = torch.cuda.mem_get_info()
    if free < 4 * numel:
        return [{"case": "uint8 2**31 + 4099 elements", "ok": True, "skipped": f"{free} bytes free"}]
    entry: dict[str, Any] = {"case": "uint8 2**31 + 4099 elements"}
    try:
        tensor = torch.zeros(numel, dtype=torch.uint8, device="cuda")
        positions = torch.tensor([0, 5, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, numel - 1], device="cuda")
        tensor[positions] = 7
        expected = torch.nonzero(tensor)
        code, got = shim(tensor)
        torch.cuda.synchronize()
        problem = f"error code {code}" if code != 0 or got is None else _mismatch(got, expected)
        entry.update(ok=problem is None, count=int(expected.shape[0]))
        if problem:
            entry["error"] = problem
        del tensor
    except Exception as error:
        entry.update(ok=False, error=f"{type(error).__name__}: {error}")
    torch.cuda.empty_cache()
    if not entry["ok"]:
        print(f"FAIL {entry['case']}: {entry['error']}", flush=True)
    return [entry]


def timing(shim: Shim) -> dict[str, Any]:
    """Milliseconds per call, shim against torch.nonzero, on 1<<24 float32 elements with 10% nonzero."""
    generator = torch.Generator().manual_seed(1)
    tensor = _values((1 << 24,), torch.float32, 0.1, generator, specials=False)

    def measure(call: Callable[[], Any]) -> float:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        return round((time.perf_counter() - started) / 20 * 1e3, 4)

    return {"elements": tensor.numel(), "shim_ms": measure(lambda: shim(tensor)),
            "torch_nonzero_ms": measure(lambda: torch.nonzero(tensor))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="where to write the results (JSON)")
    parser.add_argument("--nvcc", help="the nvcc to use (default: the one on PATH, else $CUDA_HOME/bin/nvcc)")
    parser.add_argument("--arch", default="sm_90", help="the GPU architecture to compile for (default sm_90)")
    parser.add_argument("--build-dir", help="where to build (default: a temporary folder)")
    parser.add_argument("--no-program", action="store_true", help="skip the AOTInductor program stage")
    parser.add_argument("--program-stage", action="store_true", help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args(argv)
    if args.program_stage:
        return program_stage(Path(args.results))
    results_path = Path(args.results)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"source": str(SOURCE), "torch": torch.__version__, "cuda": torch.version.cuda,
                              "python": platform.python_version()}

    def finish(status: int, summary: str) -> int:
        report["summary"] = summary
        results_path.write_text(json.dumps(report, indent=2) + "\n")
        print(summary, flush=True)
        return status

    if not torch.cuda.is_available():
        return finish(2, f"cuda_nonzero_check: no CUDA GPU visible to torch {torch.__version__}")
    report["device"] = torch.cuda.get_device_name()
    try:
        nvcc = _nvcc(args.nvcc)
        report["nvcc_version"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()
    except (OSError, FileNotFoundError) as error:
        return finish(2, f"cuda_nonzero_check: {error}")
    build_dir = Path(args.build_dir) if args.build_dir else Path(tempfile.mkdtemp(prefix="cuda_nonzero_check_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    library, report["build"] = build(nvcc, args.arch, build_dir)
    if library is None:
        return finish(2, "cuda_nonzero_check: the shim did not build (nvcc's output above)")
    foreign = report["build"]["not_in_executorch_cuda_runtime"]
    if foreign:
        print(f"FAIL the shim calls {', '.join(foreign)}, which ExecuTorch's CUDA runtime lacks", flush=True)

    shim = Shim(library)
    generator = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    outcomes = run_cases(shim, generator) + run_failures(shim) + run_huge(shim)
    report["seconds"] = round(time.perf_counter() - started, 1)
    try:
        report["timing"] = timing(shim)
    except Exception as error:
        report["timing"] = {"error": f"{type(error).__name__}: {error}"}
    if not args.no_program:
        counted, report["build_counted"] = build_counted(nvcc, args.arch, build_dir)
        outcomes += run_program_stage(counted, build_dir) if counted is not None else [
            {"case": "AOTInductor program stage", "ok": False, "error": "the counted shim did not build"}]
    report["cases"] = outcomes
    failed = [o for o in outcomes if not o["ok"]] + ([{"case": "ABI"}] if foreign else [])
    report["passed"], report["failed"] = len(outcomes) - len([o for o in outcomes if not o["ok"]]), len(failed)
    summary = (f"cuda_nonzero_check: {report['passed']} passed, {report['failed']} failed "
               f"({len(outcomes)} cases on {report['device']}, torch {torch.__version__}; "
               f"shim {report['timing'].get('shim_ms')} ms vs torch.nonzero {report['timing'].get('torch_nonzero_ms')} "
               f"ms on 1<<24 float32)")
    return finish(1 if failed else 0, summary)


if __name__ == "__main__":
    sys.exit(main())
