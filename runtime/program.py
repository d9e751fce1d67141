"""Whole Metal programs on Linux: the C++ wrapper AOTInductor generates for ExecuTorch's ``MetalBackend``,
compiled with the host compiler and run on the CPU.

On a Mac, ExecuTorch's Metal runtime ``dlopen``\\ s that wrapper, which drives Inductor's MSL kernels through
torch's AOTI mps ABI (``aoti_torch_mps_*``), allocates through the ``aoti_torch_*`` tensor functions and calls
fallback kernels by C symbol: the runtime's own (``aoti_torch_mps_mm_out``, convolution, SDPA, ...) and those
the op plugins ship. Here the same wrapper source links against shimkit's stand-in of that runtime
(``runtime/native``, :func:`runtime_library`):

* the AOTI mps ABI over :mod:`shimkit.metal` (a shader library is compiled by it; a dispatch runs its
  executor on host memory), and ExecuTorch's ``ETMetalShaderLibrary`` API over the same dispatch;
* the ``aoti_torch_*`` tensor functions over ExecuTorch ``etensor::Tensor`` handles (``libexecutorch.so``
  from the executorch wheel), as on the Mac;
* CPU reference implementations of the runtime's own fallback kernels, under the same symbols;
* every active plugin's runtime adapter (``Kernel.runtime_sources``) and the registry's generated MSL adapter,
  compiled as they would be into the Mac's runtime: ``.cpp`` as C++, ``.mm`` as Objective-C++ with clang against
  :mod:`shimkit.objc`'s Metal and MPSGraph on the CPU, with the Objective-C part of ExecuTorch's Metal API
  (``et_metal_objc.mm``: the device, ``ptr_to_mtl_buffer``, ``executeMPSGraph`` on the stream's command buffer).
  Where clang or the blocks runtime is missing, a program that needs them cannot be run here
  (:class:`~shimkit.objc.build.ObjCToolchainMissing`, a "could not run").

:class:`MetalProgram` is one such program: ``MetalProgram(wrapper_source, constants)(*inputs)`` returns its
outputs as CPU tensors. A symbol the program calls that nothing provides is a link error naming it; a
failure inside a kernel call, which the generated wrapper does not check, is raised after the run.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch

import shimkit._progress as progress
import shimkit.metal as metal_package
from shimkit.csrc.build import (INCLUDE_DIR as CSRC_INCLUDE, MSL_ADAPTER, PORTABLE_ROOTS, SANITIZER_FLAGS, SOURCE_DIR,
                                compile_objects, compile_shared_library, package_folder, sanitize_requested,
                                sdk_sources, torch_include)
from shimkit.registry.derive import BackendConfig
from shimkit.runtime.generated import msl_adapter_source
from shimkit.runtime.sources import (RUNTIME_DIR, UPSTREAM_RUNTIME_FOLDER, compile_arguments, compile_core,
                                     metal_runtime_tree, own_fallbacks, runtime_sources)
from shimkit.store import KEY_CHARS, EnvironmentFailure, default_store, digest_of, tree_digest

# torch's ScalarType codes, which the AOTI ABI passes as int32, asked of libtorch (its aoti_torch_dtype_*
# getters), as runtime/native reads them from shimkit/c10_codes.h.
_LIBTORCH = ctypes.CDLL(str(package_folder("torch") / "lib" / "libtorch_cpu.so"))
DTYPE_CODES = {dtype: getattr(_LIBTORCH, f"aoti_torch_dtype_{str(dtype).removeprefix('torch.')}")()
               for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                             torch.float32, torch.float64, torch.bool, torch.bfloat16)}
DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
# How a wrapper is compiled: Inductor's cpp-wrapper for mps, without libtorch (ExecuTorch's
# aot_inductor.link_libtorch=False), its constants in an external weights blob (ExecuTorch's
# package_constants_on_disk_format="binary_blob", which makes Inductor define USE_MMAP_EXTERNAL): MetalBackend::init
# hands the program that blob through AOTInductorModelUpdateConstantsFromBlob (metal_backend.cpp:382-392).
WRAPPER_FLAGS = ("-O1", "-DUSE_MPS", "-DUSE_MMAP_EXTERNAL", "-DC10_USING_CUSTOM_GENERATED_MACROS",
                 "-Wno-unused-result", "-fvisibility=default")
# The embedded section AOTInductor's runtime declares stays empty.
_EMBEDDED_CONSTANTS = "\n#include <cstdint>\nalignas(64) uint8_t _binary_constants_bin_start[16] = {};\nuint8_t _binary_constants_bin_end[1] = {};\n"


class ProgramError(RuntimeError):
    """The program failed while running: the wrapper's message and the runtime call that failed."""


class Unlinkable(RuntimeError):
    """The program calls a symbol that neither the runtime nor any active plugin provides."""


class WrapperDoesNotCompile(RuntimeError):
    """The generated wrapper does not compile against the runtime: the compiler's errors, each with the
    wrapper's line (a c-shim called with other arguments than a plugin declared, for one)."""


class KernelNotCompiled(ProgramError):
    """An MSL kernel of the program did not compile for the CPU (shimkit.metal's message says why): the
    program could not be run here, which says nothing about its numbers."""


_ABI_NAME = re.compile(r"\baoti_torch_\w+")
# A c-shim declared (the wrapper declares each custom op's shim, called or not), not called.
_DECLARATION = re.compile(r"\bAOTITorchError\s+aoti_torch_\w+\s*\([^;{}]*\)\s*;")


def adapter_sources(config: BackendConfig) -> tuple[list[str], str]:
    """What ``config``'s plugins put into the runtime here: their C++ and Objective-C++ runtime sources and the
    generated MSL adapter source. The SDK is in the runtime already."""
    sdk = set(sdk_sources())
    sources = [s for s in config.kernel_sources if s.endswith((".cpp", ".cc", ".cxx", ".mm")) and s not in sdk]
    return list(dict.fromkeys(sources)), msl_adapter_source(config)


def runtime_library(config: BackendConfig | None) -> Path:
    """The stand-in Metal runtime with ``config``'s plugin adapters (a registry ``BackendConfig`` for mps;
    ``None``: none, the stock runtime), cached by a digest of everything in it."""
    adapters, generated = adapter_sources(config) if config is not None else ([], "")
    replaced = _replaced_by_plugins(config)
    fallbacks = None if not replaced else tuple(path for path, shims in own_fallbacks().items()
                                                if not shims & replaced)
    return _runtime_library(tuple(adapters), generated, fallbacks)


def _replaced_by_plugins(config: BackendConfig | None) -> set[str]:
    """The runtime's own c-shims that ``config``'s plugins ship kernels of their own for (shimkit's addmm for stock's
    ``op_addmm.mm``): the plugin's is the one its programs link, as it would be built into the Mac's runtime."""
    if config is None:
        return set()
    return {p.shim.symbol for p in config.kernel_providers.values() if p.shim is not None and p.shim.kernel is not None}


def program_runtime(config: BackendConfig | None, wrapper_source: str) -> Path:
    """The runtime :func:`runtime_library` would build, less what the wrapper ``wrapper_source`` cannot reach:
    the runtime's own fallback units whose c-shims it does not call, and the kernels of the plugins whose
    c-shims it does not call (with the generated MSL adapter unless one of those it calls is an MSL kernel).
    A tiny CNN's runtime is then 18 of 30 units. A program that does not link against it (a kernel
    calling another plugin's code) links against the whole runtime: see :func:`_build_side_by_side`."""
    called = set(_ABI_NAME.findall(_DECLARATION.sub("", wrapper_source)))
    replaced = _replaced_by_plugins(config)
    fallbacks = tuple(path for path, shims in own_fallbacks().items() if shims & called and not shims & replaced)
    if config is None:
        return _runtime_library((), "", fallbacks)
    every, generated = adapter_sources(config)
    kernels = {id(p.shim.kernel): p.shim.kernel for p in config.kernel_providers.values()
               if p.shim is not None and p.shim.kernel is not None and p.shim.symbol in called}
    reached = {path for kernel in kernels.values() for path in kernel.runtime_paths}
    msl = any(kernel.msl is not None for kernel in kernels.values())
    if msl:
        reached.add(MSL_ADAPTER)
    return _runtime_library(tuple(path for path in every if path in reached), generated if msl else "", fallbacks)


def upstream_program_runtime(tree: Path, config: BackendConfig | None) -> Path:
    """ExecuTorch's own Metal runtime of the checkout ``tree`` (:mod:`shimkit.runtime.upstream`), with ``config``'s
    plugin adapters (``None``: none, the stock runtime) compiled into it as ExecuTorch's build would."""
    from shimkit.runtime.upstream import upstream_runtime_library

    adapters, generated = adapter_sources(config) if config is not None else ([], "")
    return upstream_runtime_library(tree, adapters, generated)


def build_runtime_in_background(config: BackendConfig | None) -> None:
    """Start compiling what every program's runtime compiles (``shimkit.runtime.sources``' core) on a thread
    of its own, so that it compiles while the model lowers (about 11 s of compiles on two cores when nothing
    is cached); :func:`program_runtime` then finds those objects built, or waits for them in the artifact
    store. A failure here is left for that call to meet and report."""
    def build() -> None:
        try:
            compile_core()
        except Exception:  # raised again, and reported, where the program asks for its runtime
            pass

    threading.Thread(target=build, name="shimkit-runtime-build", daemon=True).start()


def _unit(text: str) -> str:
    """``text`` saved as a C++ source, an entry of the artifact store named by its digest."""
    store = default_store()

    def produce(staging: Path) -> None:
        (staging / "unit.cpp").write_text(text)

    return str(store.build("source", store.key("source", [text]), produce) / "unit.cpp")


def _adapter_unit(path: str) -> str:
    """A translation unit ``#include``-ing one plugin adapter (an ``.mm`` file is C++ here), so that the
    compiler's messages name the adapter's own file and line. A quoted include cannot hold a ``"`` (the
    preprocessor reads no escapes there): such a path is included in angle brackets, which can."""
    if not Path(path).is_absolute() or any(c in path for c in "\n\r\0"):
        raise ValueError(f"adapter path {path!r} cannot be #include-d (relative, or a line break or NUL in it)")
    checkout = PORTABLE_ROOTS["<checkout>"].rstrip("/") + "/"
    relative = path[len(checkout):] if path.startswith(checkout) else None
    if relative is not None and not any(c in relative for c in '"\\'):
        # A built-in adapter by its place in the checkout (found through the runtime's -iquote of it): the
        # same unit, so the same object, in every clone.
        directive = f'#include "{relative}"'
    elif '"' not in path and "\\" not in path:
        directive = f'#include "{path}"'
    elif ">" not in path:
        directive = f"#include <{path}>"
    else:
        raise ValueError(f"adapter path {path!r} cannot be #include-d (it holds both a quote and '>')")
    return _unit(f"// Generated by shimkit.runtime.program: one runtime adapter, compiled as C++.\n{directive}\n")


# The Objective-C part of ExecuTorch's Metal API, for adapters in Objective-C++.
OBJC_API = RUNTIME_DIR / "et_metal_objc.mm"


def _objc_objects(sources: Sequence[str], compiling: dict) -> list[str]:
    """``sources`` (Objective-C++) compiled with clang against shimkit.objc, with the runtime's headers and macros;
    with ``SHIMKIT_SANITIZE=1``, instrumented by clang's AddressSanitizer and UBSan, whose calls GCC's runtimes (which
    ``csrc/sanitize.sh`` preloads) answer."""
    from shimkit.objc.build import compile_objects as compile_objc_objects

    flags = [*(f"-D{name}={value}" for name, value in (("SHIMKIT_WITH_METAL", "0"), *compiling["define_macros"])),
             *(flag for flag in compiling["extra_flags"] if flag not in SANITIZER_FLAGS)]
    return compile_objc_objects(sources, include_dirs=[str(CSRC_INCLUDE), *compiling["include_dirs"]],
                                extra_flags=flags, sanitize=sanitize_requested())


@functools.lru_cache(maxsize=16)
def _runtime_library(adapters: tuple[str, ...], generated: str, fallbacks: tuple[str, ...] | None = None) -> Path:
    objc = [path for path in adapters if path.endswith(".mm")]
    units = [_adapter_unit(path) for path in adapters if path not in objc] + ([_unit(generated)] if generated else [])
    sources = runtime_sources(units, fallbacks)
    compiling = compile_arguments()
    objects, library_dirs, libraries = [], [str(package_folder("executorch") / "lib")], ["executorch", "dl"]
    if objc:
        from shimkit.objc.build import framework_library

        objects = _objc_objects([str(OBJC_API), *objc], compiling)
        framework = framework_library(sanitize=sanitize_requested())
        library_dirs.append(str(framework.parent))
        libraries += [framework.name.removeprefix("lib").removesuffix(".so"), "BlocksRuntime"]
    # A program names its runtime in DT_NEEDED, and the loader binds that name to the first library of the
    # name a process has loaded: each runtime needs a name of its own, from what is in it.
    identity = digest_of([runtime_fingerprint(), generated, str(sanitize_requested()), repr(fallbacks),
                          *(part for adapter in adapters for part in (adapter, Path(adapter).read_bytes()))])
    name = f"shimkit-metal-runtime-{identity[:KEY_CHARS]}"
    return compile_shared_library(
        name, sources, include_dirs=compiling["include_dirs"], define_macros=compiling["define_macros"],
        library_dirs=library_dirs, libraries=libraries, objects=objects,
        extra_flags=[*compiling["extra_flags"], "-Wl,-Bsymbolic", "-Wl,--no-undefined", f"-Wl,-soname,{name}.so"],
        depends=sorted({*(RUNTIME_DIR / "include").rglob("*.h"), *map(Path, adapters),
                        *(header for adapter in adapters for header in Path(adapter).parent.glob("*.h"))}))


def runtime_fingerprint() -> str:
    """A digest of what decides how a program runs here besides its own source: the runtime's sources and
    headers, shimkit.metal's translation of MSL (front end and metal_stdlib), shimkit.objc, and the ExecuTorch
    checkout whose runtime programs link (:func:`metal_runtime_tree`), if one is given."""
    tree = metal_runtime_tree()
    return _fingerprint(str(tree) if tree is not None else "")


@functools.lru_cache(maxsize=4)
def _fingerprint(tree: str) -> str:
    from shimkit.objc.build import OBJC_DIR

    metal = Path(metal_package.__file__).resolve().parent
    here = Path(__file__).resolve().parent
    upstream = [] if not tree else [tree, tree_digest(Path(tree) / UPSTREAM_RUNTIME_FOLDER),
                                    tree_digest(Path(tree) / "backends" / "aoti"), tree_digest(here / "upstream_glue"),
                                    (here / "upstream.py").read_text()]
    return digest_of([tree_digest(RUNTIME_DIR), tree_digest(SOURCE_DIR / "sdk"), tree_digest(SOURCE_DIR / "include"),
                      tree_digest(metal, ("*.py",)), tree_digest(metal / "include"), tree_digest(OBJC_DIR), *upstream])


# AOTInductor pastes its runtime's interface (interface.cpp: the C functions that create and run a model
# container) into every wrapper after the device's headers. That part, and the model base class it
# instantiates for the model, are the same in every program: 5 of the 10 s a small wrapper took at -O1.
# So a wrapper compiles as two units, as AOTInductor's own static-linkage mode splits it: the interface with
# the base class instantiated once (the same object for every program, prebuilt), and the model's part.
_INTERFACE = (package_folder("torch") / "_inductor" / "codegen" / "aoti_runtime" / "interface.cpp").read_text()
MPS_HEADERS = ("\n#include <torch/csrc/inductor/aoti_include/mps.h>\n"
               "#include <torch/csrc/inductor/aoti_torch/c/shim_mps.h>\n")
_MODEL_BASE = "torch::aot_inductor::AOTInductorModelBase<torch::aot_inductor::AOTInductorModel>"


def interface_unit(headers: str = MPS_HEADERS) -> str:
    """The unit every program of a device shares: its headers, AOTInductor's interface, the base class."""
    return f"{headers}{_INTERFACE}\ntemplate class {_MODEL_BASE};\n"


def _split_wrapper(text: str) -> tuple[str, str] | None:
    """``text`` as (:func:`interface_unit`, the model's unit), or None where it does not start with headers
    and AOTInductor's interface."""
    head, interface, model = text.partition(_INTERFACE)
    if not interface or any(line.strip() and not line.startswith("#include ") for line in head.splitlines()):
        return None
    includes = "".join(line + "\n" for line in (head + interface).splitlines() if line.startswith("#include "))
    return interface_unit(head), f"{includes}extern template class {_MODEL_BASE};\n{model}"


def _wrapper_files(source: str, split: bool = True) -> list[Path]:
    """``source`` with the constants' section, saved in the artifact store: as its two units, or one where it
    cannot be split or ``split`` is False."""
    text = source + _EMBEDDED_CONSTANTS
    return [_saved_unit(unit) for unit in ((_split_wrapper(text) if split else None) or (text,))]


def _saved_unit(text: str) -> Path:
    """``text`` saved in the artifact store, named by its digest (the environment's prebuilt store answers for
    the interface unit, so its object is found under the same name)."""
    store = default_store()

    def produce(staging: Path) -> None:
        (staging / "wrapper.cpp").write_text(text)

    return store.build("metal-program-source", store.key("metal-program-source", [text]), produce) / "wrapper.cpp"


def compile_interface_object(headers: str = MPS_HEADERS) -> None:
    """The object of :func:`interface_unit`, into the store (``shimkit cache prebuild``)."""
    compile_objects([str(_saved_unit(interface_unit(headers)))], include_dirs=[str(torch_include())],
                    extra_flags=WRAPPER_FLAGS)


def compile_wrapper_object(source: str) -> None:
    """The wrapper ``source``'s objects, compiled into the store ahead of :func:`compile_wrapper`, which needs the
    runtime only to link. A wrapper that does not compile fails again there, with its message."""
    try:
        compile_objects([str(path) for path in _wrapper_files(source)], include_dirs=[str(torch_include())],
                        extra_flags=WRAPPER_FLAGS)
    except RuntimeError:
        pass


def compile_wrapper(source: str, runtime: Path) -> Path:
    """The wrapper ``source`` compiled into a shared library linked against ``runtime``, cached by digest.
    Every symbol must resolve at link time: a missing kernel is :class:`Unlinkable`, naming it. A wrapper
    whose two units do not build is compiled whole, so that its errors name its own lines."""
    try:
        return _link_wrapper(_wrapper_files(source), runtime)
    except (EnvironmentFailure, Unlinkable):
        raise
    except RuntimeError:
        pass
    [path] = _wrapper_files(source, split=False)
    try:
        return _link_wrapper([path], runtime)
    except (EnvironmentFailure, Unlinkable):
        raise
    except RuntimeError as error:
        errors = _compiler_errors(str(error), path)
        if errors:
            raise WrapperDoesNotCompile(f"the generated wrapper {path} does not compile:\n{errors}") from None
        raise


def _link_wrapper(paths: list[Path], runtime: Path, unbound: tuple[str, ...] = ()) -> Path:
    sources = [str(path) for path in paths] + ([str(_unbound_unit(unbound))] if unbound else [])
    try:
        return compile_shared_library(
            "metal-program", sources, include_dirs=[str(torch_include())],
            library_dirs=[str(runtime.parent)], libraries=[f":{runtime.name}"],
            extra_flags=[*WRAPPER_FLAGS, "-Wl,--no-undefined"])
    except EnvironmentFailure:
        raise
    except RuntimeError as error:
        missing = sorted({line.split("undefined reference to `", 1)[1].split("'", 1)[0]
                          for line in str(error).splitlines() if "undefined reference to `" in line})
        if not missing:
            raise
        tree = metal_runtime_tree()
        if tree is None:
            raise Unlinkable(f"the program calls {', '.join(missing)}, which neither shimkit's Metal runtime "
                             f"nor an active plugin provides") from None
        # A Mac loads the wrapper with its symbols bound lazily (AOTInductor links it -undefined dynamic_lookup):
        # what only AOTInductor's own code names (aoti_torch_device_type_cuda, in its device checks) fails only if
        # called. What the model's code calls, a fallback kernel the runtime lacks, is refused, as on a Mac.
        called = set(_ABI_NAME.findall(_DECLARATION.sub("", "".join(Path(path).read_text() for path in paths))))
        refused = [name for name in missing if name in called]
        if refused or unbound:
            raise Unlinkable(f"the program calls {', '.join(refused or missing)}, which neither ExecuTorch's "
                             f"Metal runtime of {tree} nor an active plugin provides") from None
        return _link_wrapper(paths, runtime, tuple(missing))


def _unbound_unit(names: tuple[str, ...]) -> Path:
    """A unit defining each of ``names`` (C identifiers a linker reported) as a function that fails when called,
    recording which: what a lazily bound symbol the runtime lacks does on a Mac, where the call fails."""
    lines = ["// Generated by shimkit.runtime.program: symbols the runtime lacks, bound to a failure.",
             'extern "C" void shimkit_runtime_record_failure(const char* message);']
    for name in names:
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"{name!r} is not a C identifier")
        lines.append(f'extern "C" int {name}(...) {{ shimkit_runtime_record_failure("{name}: called, but the '
                     f'runtime does not provide it (a Mac binds it lazily and fails here)"); return 1; }}')
    return Path(_unit("\n".join(lines) + "\n"))


def _compiler_errors(output: str, wrapper: Path, limit: int = 6) -> str:
    """The compiler's ``error:`` lines for ``wrapper``, each followed by the wrapper's line it names."""
    lines = wrapper.read_text().splitlines()
    found = []
    for line in output.splitlines():
        match = re.match(rf"{re.escape(str(wrapper))}:(\d+):\d+: error: ", line)
        if match is None:
            continue
        number = int(match.group(1))
        found.append(f"  line {number}: {line[match.end():]}")
        if 0 < number <= len(lines):
            found.append(f"    {lines[number - 1].strip()}")
        if len(found) >= 2 * limit:
            break
    return "\n".join(found)


# How Inductor embeds each kernel library in the wrapper (cpp_wrapper_mps.py): a raw string literal.
_MSL_LITERAL = re.compile(r'R"MTL\((.*?)\)MTL"', re.S)


def _build_side_by_side(wrapper_source: str, config: BackendConfig | None) -> tuple[Path, Path]:
    """The runtime and the program: the units of the program's runtime (:func:`program_runtime`), the
    wrapper's object and its MSL libraries compile at once, sharing the process's compiler slots (the run
    would compile each library when it first creates it, and the wrapper needs the runtime only to link);
    then the wrapper is linked against the runtime, or against the whole runtime where it does not link
    against its own. A library that fails here fails again, with its message, when the program creates it."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from shimkit.metal.library import ShaderLibrary

    def library(source: str) -> None:
        try:
            ShaderLibrary(source)
        except Exception:  # reported by the run, where the program asks for it
            pass

    sources = _MSL_LITERAL.findall(wrapper_source)
    tree = metal_runtime_tree()
    # A thread per build: each waits for a compiler slot (csrc.build's job limit), so none starves another.
    with ThreadPoolExecutor(max_workers=len(sources) + 2) as pool:
        if tree is not None:
            runtime = pool.submit(upstream_program_runtime, tree, config)
        else:
            runtime = pool.submit(program_runtime, config, wrapper_source)
        pool.submit(compile_wrapper_object, wrapper_source)
        progress.stage("building kernels", done=0, total=len(sources))
        for done, _ in enumerate(as_completed([pool.submit(library, source) for source in sources]), 1):
            progress.stage("building kernels", done=done, total=len(sources))
        if not runtime.done():
            progress.stage("building the runtime")
        if tree is not None:  # upstream's runtime is whole: what does not build there is the answer
            runtime_path: Path | None = runtime.result()
        else:
            try:
                runtime_path = runtime.result()
            except EnvironmentFailure:
                raise
            except RuntimeError:  # a unit it left out is one a unit it kept calls: the whole runtime links
                runtime_path = None
    progress.stage("building the program")
    if tree is not None and runtime_path is not None:
        return runtime_path, compile_wrapper(wrapper_source, runtime_path)
    if runtime_path is not None:
        try:
            return runtime_path, compile_wrapper(wrapper_source, runtime_path)
        except Unlinkable:  # a symbol the selection missed, or one nothing provides: the whole runtime says
            pass
    whole = runtime_library(config)
    return whole, compile_wrapper(wrapper_source, whole)


_ResolverType = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)


_compile_failures = threading.local()
# The last MSL compile that failed in this process: ExecuTorch's own runtime remembers a library that did not compile
# and answers "Library not compiled" from then on (et_metal.mm:402-419) without compiling it again.
_last_compile_failure: list[str] = []
# What that runtime says when a library it needs did not compile, on this call or an earlier one.
_UPSTREAM_LIBRARY_NOT_COMPILED = ("Library not compiled", "Failed to compile shader library")


def _resolve(source: bytes, kernel: bytes | None, reply: int, size: int) -> int:
    """The runtime's MSL compiler: compiles ``source`` with shimkit.metal and names where ``kernel`` runs."""
    from shimkit.metal.library import ShaderLibrary

    try:
        library = ShaderLibrary(source.decode())
        answer = "" if kernel is None else "{}\n{} {} {}".format(*library.launcher(kernel.decode()))
        status = 0
    except BaseException as error:  # nothing may unwind into C++
        answer, status = f"{type(error).__name__}: {error}", 1
        _compile_failures.message = answer
        _last_compile_failure[:] = [answer]
    data = answer.encode()[: max(0, size)]
    ctypes.memmove(reply, data, len(data))
    ctypes.memset(reply + len(data), 0, 1)
    return status


_resolver = _ResolverType(_resolve)
_loaded: dict[Path, ctypes.CDLL] = {}
_load_lock = threading.Lock()


def _storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor``'s whole storage (a uint8 view of it), as Inductor writes a constant into the weights
    blob."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


def load_runtime(path: Path) -> ctypes.CDLL:
    """The runtime library at ``path``, loaded once per process with its MSL compiler registered."""
    with _load_lock:
        if path not in _loaded:
            library = ctypes.CDLL(str(path))
            library.shimkit_runtime_set_resolver(_resolver)
            library.shimkit_runtime_live_tensors.restype = ctypes.c_int64
            library.shimkit_runtime_take_failure.restype = ctypes.c_size_t
            library.shimkit_runtime_take_failure.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            library.shimkit_runtime_take_divergences.restype = ctypes.c_size_t
            library.shimkit_runtime_take_divergences.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            library.shimkit_runtime_last_error.restype = ctypes.c_char_p
            library.aoti_torch_device_type_mps.restype = ctypes.c_int32
            library.aoti_torch_create_tensor_from_blob_v2.argtypes = [
                ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64]
            for name in ("aoti_torch_get_sizes", "aoti_torch_get_strides"):
                getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]
            library.aoti_torch_get_dim.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
            library.aoti_torch_get_dtype.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]
            library.aoti_torch_get_data_ptr.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
            library.aoti_torch_delete_tensor_object.argtypes = [ctypes.c_void_p]
            library.aoti_torch_device_type_cpu.restype = ctypes.c_int32
            library.aoti_torch_empty_strided.argtypes = [
                ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), ctypes.c_int32,
                ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)]
            library.aoti_torch_copy_.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
            _loaded[path] = library
        return _loaded[path]


def take_failure(runtime: ctypes.CDLL) -> str:
    """The runtime's first failure since the last call ("" if none)."""
    buffer = ctypes.create_string_buffer(4096)
    runtime.shimkit_runtime_take_failure(buffer, len(buffer))
    return buffer.value.decode(errors="replace")


def take_divergences(runtime: ctypes.CDLL) -> list[tuple[str, str, str]]:
    """``(c-shim, behaviour, detail)`` for each call since the last take on which the runtime's fallback computed
    what upstream's runtime computes where that differs from ATen (``note_divergence`` in fallback_common.h)."""
    size = 4096
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = runtime.shimkit_runtime_take_divergences(buffer, size)
        if length < size:
            break
        size = length + 1
    divergences = []
    for line in buffer.value.decode(errors="replace").splitlines():
        symbol, _, rest = line.partition("\t")
        behaviour, _, detail = rest.partition("\t")
        divergences.append((symbol, behaviour, detail))
    return divergences


def _as_execute_copies(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """What upstream's ``MetalBackend::execute`` hands the program for ``inputs``: each tensor of a dtype the runtime
    holds as a new contiguous one (see :func:`_inputs_made_contiguous`), the others as they are."""
    return [i.detach().contiguous() if i.dtype in DTYPE_CODES else i for i in inputs]


def _inputs_made_contiguous(inputs: Sequence[torch.Tensor]) -> list[tuple[str, str, str]]:
    """Upstream's ``MetalBackend::execute`` makes each input a new tensor of the input's sizes alone and copies the
    caller's into it (metal_backend.cpp:515-536 at cff6f4d: ``aoti_torch_empty_strided(..., nullptr, ...)``, then
    ``aoti_torch_copy_``), as ``__call__`` does; a program AOTInductor compiled for an input of other strides (a
    channels-last image) reads that contiguous copy in its own order: a divergence of the runtime, not of a shim."""
    return [("MetalBackend::execute", "hands the program each input as a new contiguous tensor (metal_backend.cpp:"
             "515-536), where the program was compiled for the input's own strides",
             f"input {index} {list(tensor.shape)} strides {list(tensor.stride())}")
            for index, tensor in enumerate(inputs) if tensor.dtype in DTYPE_CODES and not tensor.is_contiguous()]


def tensor_handle(runtime: ctypes.CDLL, tensor: torch.Tensor, device_type: int | None = None) -> int:
    """A runtime tensor handle over ``tensor``'s memory (not a copy: keep ``tensor`` alive) on the c10 device
    ``device_type``, mps by default: the code the runtime was compiled with (``shimkit/c10_codes.h``), so
    that Python keeps no copy of it."""
    if device_type is None:
        device_type = runtime.aoti_torch_device_type_mps()
    if tensor.dtype not in DTYPE_CODES:
        raise TypeError(f"a Metal program has no {tensor.dtype} tensors")
    rank = tensor.dim()
    sizes = (ctypes.c_int64 * max(rank, 1))(*tensor.shape)
    strides = (ctypes.c_int64 * max(rank, 1))(*tensor.stride())
    handle = ctypes.c_void_p()
    code = runtime.aoti_torch_create_tensor_from_blob_v2(
        tensor.data_ptr() or None, rank, sizes, strides, 0, DTYPE_CODES[tensor.dtype], device_type, 0,
        ctypes.byref(handle), 0, None, 0)
    if code != 0:
        raise ProgramError(f"could not wrap a {tensor.dtype} tensor: {take_failure(runtime)}")
    assert handle.value is not None
    return handle.value


def device_copy(runtime: ctypes.CDLL, tensor: torch.Tensor) -> int:
    """A new mps tensor of the runtime holding ``tensor``'s values, made as MetalBackend::execute makes a program's
    inputs (metal_backend.cpp:515-536 at cff6f4d): ``aoti_torch_empty_strided`` (the runtime's own memory, which it
    registers as a Metal buffer), then ``aoti_torch_copy_`` from a cpu tensor over the caller's memory."""
    source = tensor_handle(runtime, tensor, runtime.aoti_torch_device_type_cpu())
    try:
        rank = tensor.dim()
        sizes = (ctypes.c_int64 * max(rank, 1))(*tensor.shape)
        strides = (ctypes.c_int64 * max(rank, 1))(*tensor.stride())
        handle = ctypes.c_void_p()
        if (runtime.aoti_torch_empty_strided(rank, sizes, strides, DTYPE_CODES[tensor.dtype],
                                             runtime.aoti_torch_device_type_mps(), 0, ctypes.byref(handle)) != 0
                or handle.value is None):
            raise ProgramError(f"could not allocate a {tensor.dtype} input {list(tensor.shape)}: "
                               f"{take_failure(runtime)}")
        if tensor.numel() and runtime.aoti_torch_copy_(handle, source, 0) != 0:
            runtime.aoti_torch_delete_tensor_object(handle)
            raise ProgramError(f"could not copy a {tensor.dtype} input {list(tensor.shape)}: {take_failure(runtime)}")
        return handle.value
    finally:
        runtime.aoti_torch_delete_tensor_object(source)


def tensor_from_handle(runtime: ctypes.CDLL, handle: int) -> torch.Tensor:
    """A CPU copy of the runtime tensor ``handle`` (which stays the caller's to delete)."""
    dim, dtype, data = ctypes.c_int64(), ctypes.c_int32(), ctypes.c_void_p()
    sizes, strides = ctypes.POINTER(ctypes.c_int64)(), ctypes.POINTER(ctypes.c_int64)()
    if (runtime.aoti_torch_get_dim(handle, ctypes.byref(dim)) or runtime.aoti_torch_get_dtype(handle, ctypes.byref(dtype))
            or runtime.aoti_torch_get_sizes(handle, ctypes.byref(sizes))
            or runtime.aoti_torch_get_strides(handle, ctypes.byref(strides))
            or runtime.aoti_torch_get_data_ptr(handle, ctypes.byref(data))):
        raise ProgramError(f"could not read an output: {take_failure(runtime)}")
    shape = [sizes[d] for d in range(dim.value)]
    stride = [strides[d] for d in range(dim.value)]
    result = torch.empty_strided(shape, stride, dtype=DTYPES[dtype.value])
    if result.numel():
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        ctypes.memmove(result.data_ptr(), data, span * result.element_size())
    return result


class MetalProgram:
    """One generated wrapper, compiled and loaded: ``program(*inputs)`` runs it on CPU tensors.

    ``constants`` maps each constant's original FQN (or internal name) to its CPU value, which the program
    copies into its weights at load, as ExecuTorch loads the weights blob. ``config`` picks the plugins whose
    adapters the runtime carries (``None``: none, the stock runtime)."""

    def __init__(self, wrapper_source: str, constants: Mapping[str, torch.Tensor], *,
                 config: BackendConfig | None = None) -> None:
        self.runtime_path, self.path = _build_side_by_side(wrapper_source, config)
        # ExecuTorch's own runtime keeps tracking a deleted program's constant addresses (restart): the models a
        # restart replaced are kept until this program goes, so that no new constant lands at a tracked address.
        self._upstream = metal_runtime_tree() is not None
        self._retired: list[ctypes.c_void_p] = []
        self.runtime = load_runtime(self.runtime_path)
        self.library = ctypes.CDLL(str(self.path))
        take_failure(self.runtime)
        self._container = ctypes.c_void_p()
        self._create_container()
        self.num_inputs = self._count("AOTInductorModelContainerGetNumInputs")
        self.num_outputs = self._count("AOTInductorModelContainerGetNumOutputs")
        # What its runs met where upstream's runtime computes otherwise than ATen (take_divergences), in order.
        self.divergences: list[tuple[str, str, str]] = []
        # Kept to load the program afresh (restart): the tensors, not a second copy of their bytes.
        self._constants = constants
        progress.stage("loading the weights")
        self._update_constants(self._weights_blob(constants))

    def _create_container(self) -> None:
        self._check(self.library.AOTInductorModelContainerCreateWithDevice(
            ctypes.byref(self._container), ctypes.c_size_t(1), b"mps", None), "creating the model")

    def restart(self) -> None:
        """The program loaded afresh from its weights blob, as ExecuTorch loads a method: its mutable buffers (a KV
        cache a run wrote) hold their first values again. A new model, not the blob loaded into this one:
        AOTInductor's ``load_constants`` frees the old constants' memory but keeps the old handles in its map
        (``emplace``), so a second ``UpdateConstantsFromBlob`` leaves the model reading freed memory.

        Under ExecuTorch's own runtime the replaced model is kept (its weights' memory with it) until this program
        goes: that runtime never stops tracking the address of a constant it made from a blob
        (``aoti_torch_delete_tensor_object`` skips such a tensor, memory.cpp:240-245) and refuses a new constant
        at a tracked address (memory.cpp:120-126), so a model loaded where a deleted one was cannot start. On a
        Mac, an app that unloads a Metal program and loads one whose weights land at the same address fails
        the same way."""
        if self._upstream:
            self._retired.append(self._container)
        else:
            self.library.AOTInductorModelContainerDelete(self._container)
        self._container = ctypes.c_void_p()
        self._create_container()
        self._update_constants(self._weights_blob(self._constants))

    def _count(self, function: str) -> int:
        count = ctypes.c_size_t()
        self._check(getattr(self.library, function)(self._container, ctypes.byref(count)), function)
        return count.value

    def _check(self, code: int, what: str) -> None:
        failure = take_failure(self.runtime)
        if code != 0 or failure:
            message = ctypes.c_char_p()
            getter = getattr(self.library, "AOTInductorGetLastError", None)
            wrapper = ""
            if code != 0 and getter is not None and getter(ctypes.byref(message)) == 0 and message.value:
                wrapper = message.value.decode(errors="replace")
            details = "; ".join(p for p in (wrapper, failure and f"runtime: {failure}") if p)
            raise ProgramError(f"{what} failed: {details or f'error code {code}'}")

    def _weights_blob(self, constants: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The weights blob ExecuTorch's MetalBackend loads, made as Inductor serializes it (codecache.py's
        binary_blob: each constant not folded, in the program's order, its whole storage's bytes padded with zeros
        to the size the program reads, ``GetConstantDataSize``), as one uint8 tensor: each storage is copied into
        it once (a real model's weights are hundreds of megabytes)."""
        count = self._count("AOTInductorModelContainerGetNumConstants")
        slots: list[tuple[torch.Tensor, int]] = []
        for index in range(count):
            folded, size = ctypes.c_bool(), ctypes.c_size_t()
            self._check(self.library.AOTInductorModelContainerGetConstantFromFolded(
                self._container, ctypes.c_size_t(index), ctypes.byref(folded)), "reading a constant")
            if folded.value:
                continue
            name, fqn = ctypes.c_char_p(), ctypes.c_char_p()
            self._check(self.library.AOTInductorModelContainerGetConstantName(
                self._container, ctypes.c_size_t(index), ctypes.byref(name)), "reading a constant's name")
            self._check(self.library.AOTInductorModelContainerGetConstantOriginalFQN(
                self._container, ctypes.c_size_t(index), ctypes.byref(fqn)), "reading a constant's name")
            self._check(self.library.AOTInductorModelContainerGetConstantDataSize(
                self._container, ctypes.c_size_t(index), ctypes.byref(size)), "reading a constant's size")
            names = ((name.value or b"").decode(), (fqn.value or b"").decode())
            key = next((k for k in reversed(names) if k in constants), None)
            if key is None:
                raise ProgramError(f"no value for the program's constant {names[0]} ({names[1]})")
            data = _storage_bytes(constants[key].detach())
            if data.numel() > size.value:
                raise ProgramError(f"the program's constant {names[0]} ({names[1]}) holds {size.value} bytes, its value "
                                   f"{list(constants[key].shape)} {constants[key].dtype} {data.numel()}: not the "
                                   f"tensor it was compiled with")
            slots.append((data, size.value))
        blob = torch.empty(max(sum(padded for _, padded in slots), 1), dtype=torch.uint8)  # each byte written once
        offset = 0
        for data, padded in slots:
            blob[offset:offset + data.numel()].copy_(data)
            blob[offset + data.numel():offset + padded].zero_()
            offset += padded
        return blob

    def _update_constants(self, blob: torch.Tensor) -> None:
        """The weights blob handed to the program, as MetalBackend::init does (the program copies it)."""
        self._check(self.library.AOTInductorModelUpdateConstantsFromBlob(
            self._container, ctypes.c_void_p(blob.data_ptr())), "loading the constants")

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if len(inputs) != self.num_inputs or not all(isinstance(i, torch.Tensor) for i in inputs):
            raise ProgramError(f"the program takes {self.num_inputs} tensors, got "
                               f"{[type(i).__name__ for i in inputs]}")
        kept = _as_execute_copies(inputs)
        self.divergences += [d for d in _inputs_made_contiguous(inputs) if d not in self.divergences]
        handles = (ctypes.c_void_p * max(len(kept), 1))(*[device_copy(self.runtime, t) for t in kept])
        outputs = (ctypes.c_void_p * max(self.num_outputs, 1))()
        _compile_failures.message = None
        take_failure(self.runtime)  # a failure left by something else using the runtime is not this run's
        take_divergences(self.runtime)
        code = self.library.AOTInductorModelContainerRun(
            self._container, handles, ctypes.c_size_t(len(kept)), outputs, ctypes.c_size_t(self.num_outputs),
            None, None)  # the inputs' handles are the program's now
        if code == 0:  # as MetalBackend::execute: the stream's encoded work runs before the outputs are read
            code = self.runtime.shimkit_runtime_synchronize()
        self.divergences += [d for d in take_divergences(self.runtime) if d not in self.divergences]
        try:
            try:
                self._check(code, "running the program")
            except ProgramError as error:
                if getattr(_compile_failures, "message", None):
                    raise KernelNotCompiled(f"{error}") from None
                if _last_compile_failure and any(text in str(error) for text in _UPSTREAM_LIBRARY_NOT_COMPILED):
                    raise KernelNotCompiled(f"{error}; the library did not compile here: "
                                            f"{_last_compile_failure[0]}") from None
                raise
            return [tensor_from_handle(self.runtime, outputs[i] or 0) for i in range(self.num_outputs)]
        finally:
            for index in range(self.num_outputs):
                if outputs[index]:
                    self.runtime.aoti_torch_delete_tensor_object(outputs[index])

    def __del__(self) -> None:
        for container in [*getattr(self, "_retired", []), getattr(self, "_container", None)]:
            if container:
                self.library.AOTInductorModelContainerDelete(container)
