"""Compiled MSL libraries and their kernels, called as ``torch.mps.compile_shader``'s are.

A library is the front end's C++ (``frontend.py``) plus shimkit's ``metal_stdlib``, compiled by the host
C++ compiler into a shared library cached by the digest of everything that went into it, and loaded with
``ctypes``. A kernel call binds its arguments as torch binds them to a Metal compute encoder
(``torch/csrc/mps/Module.cpp``): tensors as buffers, in argument order, written in place; Python floats
as 32-bit floats, ints and bools as 64-bit longs, lists as arrays; ``arg_casts`` converts scalars.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import re
import struct
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from shimkit.csrc.build import SANITIZER_FLAGS, compiler_command, run_compiler, sanitize_requested, torch_include
from shimkit.metal.frontend import KernelInfo, Translation, check_supported, embed_headers, launcher, translate
from shimkit.metal.loops import group_function, split_kernels
from shimkit.store import Store, default_store, tree_digest

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
MAX_THREADS_PER_THREADGROUP = 1024
THREAD_EXECUTION_WIDTH = 32
CASTS = {"fp16": torch.float16, "bf16": torch.bfloat16, "int32": torch.int32, "int16": torch.int16,
         "int8": torch.int8, "uint8": torch.uint8}
FLAGS = ("-std=c++20", "-O2", "-fsingle-precision-constant", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-strict-aliasing", "-w",
         "-pthread")


class MetalCompileError(SyntaxError):
    """The host compiler rejected the MSL; the message quotes it with the MSL line. A ``SyntaxError``, as
    ``torch.mps.compile_shader`` raises for MSL that does not compile."""


class ErrorMessage(ctypes.Structure):
    """c10/metal/error.h's ErrorMessage: what a kernel's TORCH_CHECK-like report writes."""
    _fields_ = [("file", ctypes.c_char * 128), ("func", ctypes.c_char * 128), ("message", ctypes.c_char * 250),
                ("line", ctypes.c_uint)]


class ErrorMessages(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint), ("msg", ErrorMessage * 30)]


class Dispatch(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_ulong * 3), ("group", ctypes.c_ulong * 3), ("workers", ctypes.c_int),
                ("reverse", ctypes.c_int)]


class MetalRaceError(RuntimeError):
    """A kernel's result depends on the order of its threads between two barriers: a thread reads memory
    another thread of its threadgroup writes with no barrier between them (Metal leaves it undefined)."""


_lock = threading.Lock()
_compiled: dict[tuple[str, bool, bool, bool, tuple[str, ...] | None], tuple[ctypes.CDLL, Translation]] = {}
_building: dict[tuple[str, bool, bool, bool, tuple[str, ...] | None], threading.Lock] = {}
# Part of every library's cache key. Format 1 shared one source file name between concurrent builds, so a
# build could compile another's half-written source into a library without kernels (seen with 12 test
# workers); its cached libraries are never loaded again.
CACHE_FORMAT = "2"
# Worker threads per launch, read once: `os.cpu_count()` reads sysfs on every call (18 µs here, a quarter
# of a small kernel's launch through Inductor's wrapper).
WORKERS = os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def _headers_digest() -> str:
    """The digest of shimkit's metal_stdlib headers: package files, read once per process."""
    return tree_digest(INCLUDE_DIR)


def compile_library(source: str, *, sanitize: bool | None = None, ucontext_fibers: bool = False,
                    split_barriers: bool = True, kernels: Iterable[str] | None = None) -> tuple[ctypes.CDLL, Translation]:
    """The loaded library for ``source`` and its translation, compiled once per process and cached on disk.

    ``kernels`` names the kernels whose launchers the library exports (all for ``None``): a library of
    many template instantiations, such as ATen's sort with 700, compiles in a fraction of the time for the
    few a caller launches. ``ucontext_fibers`` switches cooperative fibers with glibc's ``swapcontext``
    instead of shimkit's own context switch (what AddressSanitizer builds and non-x86-64 hosts use): the
    reference the fast path is tested against. ``split_barriers=False`` runs every kernel with barriers or
    simdgroup functions on fibers, the reference the work-group loops (``loops/``) are tested against."""
    if not isinstance(source, str):
        raise TypeError(f"compile_shader expects the MSL source as a str, got {type(source).__name__}")
    sanitize = sanitize_requested() if sanitize is None else sanitize
    subset = None if kernels is None else tuple(sorted(kernels))
    key = (source, sanitize, ucontext_fibers, split_barriers, subset)
    with _lock:
        if key in _compiled:
            return _compiled[key]
        building = _building.setdefault(key, threading.Lock())
    # One build per library at a time; different libraries compile side by side (a program's kernels).
    with building:
        with _lock:
            if key in _compiled:
                return _compiled[key]
        compiler = compiler_command()
        flags = (list(FLAGS) + _half_rounding_flags(tuple(compiler)) + _simd_flags(tuple(compiler))
                 + (list(SANITIZER_FLAGS) if sanitize else [])
                 + (["-DSHIMKIT_METAL_UCONTEXT"] if ucontext_fibers else []))
        store = default_store()
        # Built meanwhile, in an empty build folder, beside the translation and the precompiled header.
        runtime = _runtime_build(store, tuple(compiler), tuple(flags), os.getpid())
        translation = _translation(source, split_barriers)
        cpp = f'#include "metal_stdlib"\n{translation.cpp_for(subset)}'
        entry = store.key("metal-library", [CACHE_FORMAT, *compiler, *flags, _headers_digest(), cpp])

        def produce(staging: Path) -> None:
            (staging / "library.cpp").write_text(cpp)  # kept beside the library, to read
            header = _precompiled_header(tuple(compiler), tuple(flags))
            linked = runtime.result()
            done = run_compiler([*compiler, *flags, *header, f"-I{INCLUDE_DIR}", str(staging / "library.cpp"),
                                 str(linked), f"-Wl,-rpath,{linked.parent}", "-o", str(staging / "library.so")])
            if done.returncode != 0:
                raise MetalCompileError(_compile_message(done.stderr, source))

        library_path = store.build("metal-library", entry, produce) / "library.so"
        runtime.result()  # loaded: the library finds it by its name
        library = ctypes.CDLL(str(library_path))
        with _lock:
            _compiled[key] = (library, translation)
            _building.pop(key, None)
        return library, translation


@functools.lru_cache(maxsize=None)
def _simd_flags(compiler: tuple[str, ...]) -> list[str]:
    """What makes the compiler vectorise the row loops of barrier-free kernels (``omp simd``, written by
    the launcher): OpenMP's simd directives alone (no OpenMP runtime), under a cost model that lets a loop
    with a scalar remainder be vectorised (GCC's -O2 model refuses those). Elementwise results are the
    same: no operation is reassociated or contracted. A compiler without an option gets none of it."""
    return [flag for flag in ("-fopenmp-simd", "-fsimd-cost-model=dynamic") if _accepts(compiler, flag)]


@functools.lru_cache(maxsize=None)
def _half_rounding_flags(compiler: tuple[str, ...]) -> list[str]:
    """What makes every ``half`` operation round to half, as Metal's do. From GCC 13 on, ISO C++ evaluates
    ``_Float16`` in float and rounds at assignments only (``a * b + a`` rounded once: found on g++ 13.3);
    ``-fexcess-precision=16`` (GCC 12 on) rounds after each operation, which GCC 12 does anyway. A compiler
    without the option (Clang) gets none."""
    return ["-fexcess-precision=16"] if _accepts(compiler, "-fexcess-precision=16", "_Float16 x;\n") else []


def _accepts(compiler: tuple[str, ...], flag: str, source: str = "int x;\n") -> bool:
    """Whether ``compiler`` compiles ``source`` with ``flag`` (an unknown option is an error for GCC and Clang)."""
    return run_compiler([*compiler, flag, "-x", "c++", "-fsyntax-only", "-"], input=source).returncode == 0


def _precompiled_header(compiler: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    """``-I`` of a folder with ``metal_stdlib`` precompiled with exactly ``flags`` (GCC finds a ``.gch``
    beside a header it includes, ahead of the header), built on first use; ``[]`` where the compiler is not
    GCC (Clang reads no ``.gch`` for an ``#include``) or the build fails (the header is then parsed as
    before). Every library's first line includes ``metal_stdlib``; parsing it and the standard headers it
    needs was most of a library's compile time (0.6 of 0.8 s for a 150 KB library of Inductor's)."""
    return _precompiled_in(default_store(), compiler, flags)


class _NoPrecompiledHeader(Exception):
    pass


@functools.lru_cache(maxsize=None)
def _precompiled_in(store: Store, compiler: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    if not _is_gcc(compiler):
        return []

    def produce(staging: Path) -> None:
        done = run_compiler([*compiler, *(f for f in flags if f != "-shared"), "-x", "c++-header",
                             str(INCLUDE_DIR / "metal_stdlib"), "-o", str(staging / "metal_stdlib.gch")])
        if done.returncode != 0:
            raise _NoPrecompiledHeader(done.stderr)

    try:
        folder = store.build("metal-pch", store.key("metal-pch", [CACHE_FORMAT, *compiler, *flags, _headers_digest()]),
                             produce)
    except _NoPrecompiledHeader:
        return []
    return [f"-I{folder}"]


@functools.lru_cache(maxsize=None)
def _runtime_build(store: Store, compiler: tuple[str, ...], flags: tuple[str, ...], process: int) -> Future:
    """:func:`_runtime_in`, started on a thread of its own; once per ``process`` (a forked child starts its
    own: the thread that would finish its parent's is not there)."""
    built: Future = Future()

    def build() -> None:
        try:
            built.set_result(_runtime_in(store, compiler, flags))
        except BaseException as error:  # handed to whoever waits for it
            built.set_exception(error)

    # Not a daemon: a process that ends meanwhile (a Ctrl-C) waits for it, and leaves no compiler running and
    # no half-built entry behind.
    threading.Thread(target=build, name="shimkit-metal-runtime").start()
    return built


def _runtime_in(store: Store, compiler: tuple[str, ...], flags: tuple[str, ...]) -> Path:
    """The shared library of ``shimkit_metal/runtime.cpp`` (the worker pool, the fiber scheduler, the lane
    records) compiled with the kernel libraries' ``flags``, loaded: the libraries linked against it find it
    by its name, which is unique to its key, so that two builds of it (the sanitizers', ucontext fibers')
    live side by side in one process."""
    key = store.key("metal-runtime", [CACHE_FORMAT, *compiler, *flags, _headers_digest()])
    name = f"libshimkit_metal_runtime_{key[:16]}.so"

    def produce(staging: Path) -> None:
        done = run_compiler([*compiler, *flags, f"-I{INCLUDE_DIR}", str(INCLUDE_DIR / "shimkit_metal" / "runtime.cpp"),
                             f"-Wl,-soname,{name}", "-o", str(staging / name)])
        if done.returncode != 0:
            raise RuntimeError(f"shimkit.metal's runtime (shimkit_metal/runtime.cpp) did not compile:\n{done.stderr}")

    path = store.build("metal-runtime", key, produce) / name
    ctypes.CDLL(str(path))
    return path


@functools.lru_cache(maxsize=None)
def _is_gcc(compiler: tuple[str, ...]) -> bool:
    done = run_compiler([*compiler, "-dM", "-E", "-x", "c++", "-"], input="")
    return done.returncode == 0 and "__GNUC__" in done.stdout and "__clang__" not in done.stdout


@functools.lru_cache(maxsize=64)
def _translation(source: str, split_barriers: bool = True) -> Translation:
    """The checked, preprocessed and translated ``source`` (compiler errors quote the MSL), its cooperative
    kernels split at their barriers where they can be (``split_barriers``)."""
    if not split_barriers:
        check_supported(source)
        return translate(_preprocess(compiler_command(), embed_headers(source, torch_include()), source))
    translation = _translation(source, False)
    cooperative = {_qualified(k.function): k.parameters for k in translation.kernels.values() if k.cooperative}
    split = split_kernels(translation.text, cooperative, INCLUDE_DIR, default_store(), tuple(compiler_command()))
    kernels = {}
    for name, kernel in translation.kernels.items():
        qualified = _qualified(kernel.function)
        kernels[name] = dataclasses.replace(
            kernel, split=group_function(kernel.function) if qualified in split.split else None,
            fibers_because=split.reasons.get(qualified) if kernel.cooperative else None)
    return Translation(text=split.text, kernels=kernels,
                       launchers=[launcher(kernel, index) for index, kernel in enumerate(kernels.values())])


def _qualified(function: str) -> str:
    """``ns::f`` for the C++ expression ``::ns::f<float>`` naming a kernel."""
    return function.partition("<")[0].strip().lstrip(":")


def _preprocess(compiler: list[str], text: str, source: str) -> str:
    """Runs the C preprocessor as Metal's would: Metal's predefined macros, no system headers. The macros
    are included by a path relative to the include folder (the compiler's working directory), so the line
    marker naming them, and with it every cache key of the translation, is the same in every checkout."""
    done = run_compiler([*compiler, "-E", "-x", "c++", "-std=c++20", "-nostdinc", "-include",
                         "shimkit_metal/macros.h", "-"], input=text, cwd=INCLUDE_DIR)
    if done.returncode != 0:
        raise MetalCompileError(_compile_message(done.stderr, source))
    return done.stdout


def _compile_message(stderr: str, source: str) -> str:
    lines = source.split("\n")
    errors = [line for line in stderr.splitlines() if ": error:" in line or ": fatal error:" in line]
    quoted = []
    for error in errors[:5]:
        quoted.append(error)
        where = re.match(r"<msl>:(\d+):", error)
        if where and 0 < int(where.group(1)) <= len(lines):
            number = int(where.group(1))
            quoted.append(f"  {number:5} | {lines[number - 1]}")
    body = "\n".join(quoted) if quoted else stderr.strip()[-4000:]
    return f"compile_shader: the MSL did not compile:\n{body}"


class MetalKernel:
    """One kernel of a :class:`ShaderLibrary`: ``kernel(*args, threads=None, group_size=None, arg_casts=None)``."""

    def __init__(self, library: ctypes.CDLL, info: KernelInfo, index: int, check_races: bool = False) -> None:
        self._info, self._check_races = info, check_races
        self._launch = getattr(library, f"shimkit_launch_{index}")
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Dispatch)]
        self._launch.restype = ctypes.c_int
        self._threadgroup_bytes = getattr(library, f"shimkit_tg_{index}")
        self._threadgroup_bytes.restype = ctypes.c_ulong
        self._last_error = library.shimkit_last_error
        self._last_error.restype = ctypes.c_char_p

    @property
    def max_threads_per_threadgroup(self) -> int:
        return min(MAX_THREADS_PER_THREADGROUP, self._info.max_threads or MAX_THREADS_PER_THREADGROUP)

    @property
    def thread_execution_width(self) -> int:
        return THREAD_EXECUTION_WIDTH

    @property
    def static_thread_group_memory_length(self) -> int:
        # Measured on request only: it is one dry call of the kernel (frontend.py).
        return int(self._threadgroup_bytes())

    @property
    def execution(self) -> str:
        """How the threads of a group run: ``"loop"`` (one after another, the kernel reaches no barrier or
        simdgroup function), ``"split"`` (loops over the group's threads between its barriers and
        simdgroup functions: ``loops/``) or ``"fibers"`` (cooperative fibers that switch at each of
        them; :attr:`fibers_because` says why)."""
        return _execution(self._info)

    @property
    def fibers_because(self) -> str | None:
        """Why a kernel runs on fibers rather than split into loops (None when it does not)."""
        return self._info.fibers_because

    def _reverse_and_compare(self, args: Sequence[Any], again: dict[int, torch.Tensor], pointers: Any,
                             dispatch: Dispatch) -> None:
        name = self._info.name
        for index, copy in again.items():
            pointers[index] = copy.data_ptr() or None
        dispatch.reverse = 1
        if self._launch(pointers, ctypes.byref(dispatch)) != 0:
            raise RuntimeError(f"kernel {name!r} failed: {self._last_error().decode()}")
        for index, copy in again.items():
            first, second = args[index].reshape(-1), copy.reshape(-1)
            same = (first == second) | ((first != first) & (second != second))
            if not bool(same.all()):
                at = int((~same).nonzero()[0])
                raise MetalRaceError(
                    f"kernel {name!r}: buffer {index} holds {first[at].item()} at element {at} with each region's "
                    f"threads run first to last and {second[at].item()} run last to first: a thread reads memory "
                    f"that another thread of its threadgroup writes with no barrier between them, which Metal "
                    f"leaves undefined")

    def __repr__(self) -> str:
        return f"<shimkit.metal kernel {self._info.name!r}: {self._info.buffers} buffers, runs as {self.execution}>"

    def __call__(self, *args: Any, threads: int | Sequence[int] | None = None,
                 group_size: int | Sequence[int] | None = None,
                 arg_casts: str | Mapping[int, str] | None = None, error_buf_idx: int | None = None) -> None:
        """Runs the kernel. ``error_buf_idx``, as in torch, binds an error buffer (c10/metal/error.h's
        ``ErrorMessages``) at that buffer index; messages the kernel reports there raise ``RuntimeError``."""
        name = self._info.name
        errors = None
        if error_buf_idx is not None:
            if not 0 <= error_buf_idx <= len(args):
                raise ValueError(f"kernel {name!r}: error_buf_idx {error_buf_idx} is outside 0..{len(args)}")
            errors = ErrorMessages()
            args = (*args[:error_buf_idx], errors, *args[error_buf_idx:])
        if len(args) != self._info.buffers:
            raise TypeError(f"kernel {name!r} takes {self._info.buffers} buffer argument(s), got {len(args)}")
        casts = _casts(name, arg_casts, len(args))
        keep: list[Any] = []
        pointers = (ctypes.c_void_p * max(1, len(args)))()
        first_numel = None
        for index, arg in enumerate(args):
            if isinstance(arg, ErrorMessages):
                pointers[index] = ctypes.addressof(arg)
            elif isinstance(arg, torch.Tensor):
                _check_tensor(name, index, arg)
                if first_numel is None:
                    first_numel = arg.numel()
                pointers[index] = arg.data_ptr() or None
                keep.append(arg)
            else:
                storage = _scalar_bytes(name, index, arg, casts.get(index))
                # Padded to 16 bytes: a 3-vector argument (uint3) is read as 16 bytes, as Metal lays it out.
                buffer = ctypes.create_string_buffer(storage, max(16, -(-len(storage) // 16) * 16))
                keep.append(buffer)
                pointers[index] = ctypes.addressof(buffer)
        if threads is None:
            if first_numel is None:
                raise ValueError(f"kernel {name!r}: no tensor argument to take `threads` from; pass threads=")
            threads = first_numel
        grid = _dims("threads", threads)
        limit = self.max_threads_per_threadgroup
        if group_size is None:
            group = [min(max(grid[0], 1), limit)] + [1] * (len(grid) - 1)
        else:
            group = _dims("group_size", group_size)
            if len(group) != len(grid):
                raise ValueError(f"group_size has {len(group)} entries but threads has {len(grid)}; give the same "
                                 f"number")
            if any(g <= 0 for g in group):
                raise ValueError(f"group_size entries must be positive, got {group}")
        total = 1
        for g in group:
            total *= g
        if total > limit:
            raise ValueError(f"kernel {name!r}: a threadgroup of {total} threads exceeds its "
                             f"max_threads_per_threadgroup ({limit})")
        dispatch = Dispatch((ctypes.c_ulong * 3)(*(grid + [1] * (3 - len(grid)))),
                            (ctypes.c_ulong * 3)(*(group + [1] * (3 - len(group)))), WORKERS, 0)
        again = None
        if self._check_races and self.execution == "split":
            # The same launch again on copies of the tensors, each region's threads last to first.
            again = {index: arg.clone() for index, arg in enumerate(args) if isinstance(arg, torch.Tensor)}
        if self._launch(pointers, ctypes.byref(dispatch)) != 0:
            raise RuntimeError(f"kernel {name!r} failed: {self._last_error().decode()}")
        if again is not None:
            self._reverse_and_compare(args, again, pointers, dispatch)
        if errors is not None and errors.count:
            reports = [f"{m.file.decode(errors='replace')}:{m.line}: {m.func.decode(errors='replace')}: "
                       f"{m.message.decode(errors='replace')}" for m in errors.msg[:min(errors.count, 30)]]
            raise RuntimeError(f"kernel {name!r} reported {errors.count} error(s): " + "; ".join(reports))


def _execution(info: KernelInfo) -> str:
    if not info.cooperative:
        return "loop"
    return "split" if info.split else "fibers"


def _check_tensor(name: str, index: int, tensor: torch.Tensor) -> None:
    if tensor.device.type != "cpu":
        raise ValueError(f"kernel {name!r}: argument {index} is a {tensor.device.type} tensor; shimkit.metal runs "
                         f"kernels on the CPU, pass a cpu tensor")
    # A buffer is the tensor's memory from its first element: any dense layout (a transposed one too,
    # which Inductor's kernels index by their own strides) is exactly the tensor, one with gaps or
    # overlaps (a slice, an expand) is not.
    if not _dense(tensor):
        raise ValueError(f"kernel {name!r}: argument {index} is not dense (strides {tensor.stride()} for shape "
                         f"{tuple(tensor.shape)}): a Metal buffer is the tensor's memory, so a view with gaps or "
                         f"overlaps cannot be one; pass .contiguous()")
    if tensor.is_complex() or tensor.dtype == torch.float64:
        raise ValueError(f"kernel {name!r}: argument {index} has dtype {tensor.dtype}, which Metal has no type for")


def _dense(tensor: torch.Tensor) -> bool:
    """Whether the tensor's elements fill ``numel`` consecutive slots, in some order of its dimensions."""
    expected = 1
    for size, stride in sorted((d for d in zip(tensor.shape, tensor.stride()) if d[0] != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _casts(name: str, arg_casts: str | Mapping[int, str] | None, count: int) -> dict[int, torch.dtype]:
    if arg_casts is None:
        return {}
    if isinstance(arg_casts, str):
        return {index: _cast(name, arg_casts) for index in range(count)}
    if isinstance(arg_casts, Mapping):
        return {int(index): _cast(name, cast) for index, cast in arg_casts.items()}
    raise TypeError(f"arg_casts must be a dtype name or a dict {{index: name}}, got {type(arg_casts).__name__}")


def _cast(name: str, cast: str) -> torch.dtype:
    if cast not in CASTS:
        raise ValueError(f"kernel {name!r}: unknown arg_casts dtype {cast!r} (expected one of {', '.join(CASTS)})")
    return CASTS[cast]


def _scalar_bytes(name: str, index: int, value: Any, cast: torch.dtype | None) -> bytes:
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"kernel {name!r}: argument {index} is an empty list; Metal cannot bind an empty array")
        values = list(value)
    elif isinstance(value, (bool, int, float)):
        values = [value]
    else:
        raise TypeError(f"kernel {name!r}: argument {index} is a {type(value).__name__}; expected a tensor, a float, "
                        f"an int, a bool or a list of numbers")
    if not all(isinstance(v, (bool, int, float)) for v in values):
        raise TypeError(f"kernel {name!r}: argument {index} holds a non-number")
    if cast is torch.bfloat16:
        # numpy has no bfloat16: its bits go out as int16.
        return torch.tensor(values, dtype=torch.float32).to(cast).view(torch.int16).numpy().tobytes()
    if cast is not None:
        source = torch.float64 if isinstance(values[0], float) else torch.int64
        return torch.tensor(values, dtype=source).to(cast).numpy().tobytes()
    if isinstance(values[0], float):
        return struct.pack(f"<{len(values)}f", *values)
    return struct.pack(f"<{len(values)}q", *(int(v) for v in values))


def _dims(label: str, value: int | Sequence[int]) -> list[int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise ValueError(f"{label} must be an int or 1 to 3 ints, got {value!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{label} entries must not be negative, got {dims}")
    return dims


# A library with more kernels than this compiles each one when it is first used: the instantiations of a
# kernel template (one per dtype and tile size) are many, and a caller uses few.
EAGER_KERNELS = 16


class ShaderLibrary:
    """The kernels of one MSL source, as attributes (``lib.my_kernel``); ``dir(lib)`` lists them.

    ``check_races=True`` runs each call of a split kernel twice, the second time on copies of its tensors
    with the threads of every region in the opposite order, and raises :class:`MetalRaceError` where the
    results differ: a race that one fixed order would silently give one answer to.

    The source is translated (and any error in it raised) at construction; its kernels compile then, or,
    past ``EAGER_KERNELS`` of them, each on its first use."""

    def __init__(self, source: str, *, ucontext_fibers: bool = False, split_barriers: bool = True,
                 check_races: bool = False) -> None:
        self._source, self._ucontext_fibers, self._split = source, ucontext_fibers, split_barriers
        self._check_races = check_races
        translation = _translation(source, split_barriers)
        self._infos = {name: (index, info) for index, (name, info) in enumerate(translation.kernels.items())}
        self._kernels: dict[str, MetalKernel] = {}
        if len(self._infos) <= EAGER_KERNELS:
            library, _ = compile_library(source, ucontext_fibers=ucontext_fibers, split_barriers=split_barriers)
            self._kernels = {name: MetalKernel(library, info, index, check_races)
                             for name, (index, info) in self._infos.items()}

    def __getattr__(self, name: str) -> MetalKernel:
        kernels, infos = self.__dict__.get("_kernels", {}), self.__dict__.get("_infos", {})
        if name in kernels:
            return kernels[name]
        if name in infos:
            library, _ = compile_library(self._source, ucontext_fibers=self._ucontext_fibers, split_barriers=self._split, kernels=(name,))
            index, info = infos[name]
            kernels[name] = MetalKernel(library, info, index, self._check_races)
            return kernels[name]
        raise AttributeError(f"the shader library has no kernel {name!r} (kernels: {', '.join(sorted(infos))})")

    def __dir__(self) -> list[str]:
        return sorted(self._infos)

    def executions(self) -> dict[str, tuple[str, str | None]]:
        """How each kernel runs (``"loop"``, ``"split"`` or ``"fibers"``) and, on fibers, why: a listing
        that compiles nothing (a library of hundreds of template instantiations compiles per kernel).

        >>> lib = compile_shader("kernel void total(device float* out, constant float* x, "
        ...                      "uint t [[thread_position_in_threadgroup]]) { float s = simd_sum(x[t]); "
        ...                      "if (t == 0) out[0] = s; }")
        >>> lib.executions()
        {'total': ('split', None)}
        """
        return {name: (_execution(info), info.fibers_because) for name, (_, info) in sorted(self._infos.items())}

    def launcher(self, name: str) -> tuple[str, int, int, int]:
        """Where a C++ host calls kernel ``name``: the shared library's path, the index of its
        ``shimkit_launch_<index>`` launcher, its max threads per threadgroup and its buffer count (the
        whole-program runtime, :mod:`shimkit.runtime.program`, dispatches through it)."""
        kernel = getattr(self, name)
        index, info = self._infos[name]
        library, _ = compile_library(self._source, ucontext_fibers=self._ucontext_fibers, split_barriers=self._split,
                                     kernels=None if len(self._infos) <= EAGER_KERNELS else (name,))
        return library._name, index, kernel.max_threads_per_threadgroup, info.buffers


def compile_shader(source: str) -> ShaderLibrary:
    """Compiles MSL ``source`` for the CPU, as ``torch.mps.compile_shader`` compiles it for the GPU.

    >>> lib = compile_shader('''
    ... kernel void fill(device float* out, constant float& value, uint i [[thread_position_in_grid]]) {
    ...   out[i] = value;
    ... }''')
    >>> x = torch.zeros(4)
    >>> lib.fill(x, 2.5)
    >>> x.tolist()
    [2.5, 2.5, 2.5, 2.5]
    """
    return ShaderLibrary(source)
