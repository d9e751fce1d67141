"""Building Objective-C++ on Linux against shimkit's runtime and frameworks.

:func:`framework_library` compiles every source of ``objc/runtime``, ``objc/Foundation``, ``objc/Metal`` and
``objc/MPSGraph`` (``*.mm``, ``*.m``, ``*.cpp``, ``*.S``) into one shared library, ``libshimkit_objc.so``: the
Objective-C runtime for clang's GNUstep 2.0 ABI and the frameworks written on it. :func:`compile_objc` builds
``.mm`` sources into a shared library or an executable linked against it (its folder on the run path).

Both are entries of shimkit's artifact store (:mod:`shimkit.store`): each source is one object keyed by its
command, its contents and the headers it read (:func:`shimkit.csrc.build._object`), and the library is keyed by
the contents of every file under ``objc/`` it is made of and the compiler's version, so an unchanged build is
reused and concurrent test workers build it once. Nothing here imports torch.

The toolchain is clang 14 or newer with ``-fobjc-runtime=gnustep-2.0 -fblocks -fexceptions -fobjc-exceptions``,
manual retain/release (no ARC), and Debian's ``libblocksruntime-dev`` (``Block.h``, ``-lBlocksRuntime``). Where it
is missing, every entry point raises :class:`ObjCToolchainMissing`.

Sanitizers: ``sanitize=True`` builds the framework (a separate entry) and the program with
``-fsanitize=address,undefined -fno-omit-frame-pointer``; run such an executable with
:func:`sanitizer_environment`. No LeakSanitizer suppression file is needed, and none is used: what the runtime
and Foundation keep for the life of the process (class tables, method caches, the UTF-8 of literals) stays
reachable from globals, and the framework runs LeakSanitizer's check itself at the start of ``exit()``, when
the main thread's autorelease pool is drained (thread-local destructors run before static ones): objects that
the program's own process-lifetime containers hold (a ``static std::unordered_map<void*, id<MTLBuffer>>``)
are still reachable then, where the usual check, after static destructors have emptied those containers,
would report them. Everything else not freed by then is reported as a leak.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from shimkit.csrc.build import _object, run_compiler
from shimkit.store import EnvironmentFailure, default_store, tree_digest

OBJC_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = OBJC_DIR / "include"
FRAMEWORK_FOLDERS = ("runtime", "Foundation", "Metal", "MPSGraph")
SOURCE_PATTERNS = ("*.mm", "*.m", "*.cpp", "*.S")
LIBRARY_NAME = "libshimkit_objc.so"
LIBRARY_FLAG = "-lshimkit_objc"
MINIMUM_CLANG = 14
OBJC_FLAGS = ("-fobjc-runtime=gnustep-2.0", "-fblocks", "-fexceptions", "-fobjc-exceptions")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined")
LINK_LIBRARIES = ("-lBlocksRuntime", "-lstdc++", "-lpthread")
MISSING_MESSAGE = ("could not run: Objective-C++ needs clang-14 and libblocksruntime-dev "
                   "(apt-get install clang-14 libblocksruntime-dev)")


class ObjCToolchainMissing(EnvironmentFailure):
    """clang 14 (or newer) or libBlocksRuntime is not installed: Objective-C++ cannot be compiled here. A
    "could not run", never a verdict on the code (:class:`~shimkit.store.EnvironmentFailure`)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(MISSING_MESSAGE + (f": {detail}" if detail else ""))


class Toolchain:
    """The clang drivers found: ``cxx`` (``clang++``) for ``.mm`` and ``.cpp``, ``cc`` (``clang``) for ``.m``
    and ``.S``, and the version line that goes into every key."""

    def __init__(self, cxx: str, cc: str, version: str) -> None:
        self.cxx, self.cc, self.version = cxx, cc, version

    def __repr__(self) -> str:
        return f"Toolchain({self.cxx!r}, {self.cc!r}, {self.version!r})"


@functools.lru_cache(maxsize=None)
def toolchain() -> Toolchain:
    """The clang to use: ``$SHIMKIT_OBJC_CXX`` if set, else ``clang++-14``, else a ``clang++`` (or
    ``clang++-N``) of version 14 or newer; checked to find ``Block.h`` and link ``-lBlocksRuntime``.
    :class:`ObjCToolchainMissing` otherwise."""
    configured = os.environ.get("SHIMKIT_OBJC_CXX")
    names = [configured] if configured else ["clang++-14", "clang++", *(f"clang++-{n}" for n in range(15, 21))]
    problems = []
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        version = _clang_version(path)
        if version is None or version[0] < MINIMUM_CLANG:
            problems.append(f"{name} is not clang {MINIMUM_CLANG} or newer")
            continue
        cc = shutil.which(name.replace("clang++", "clang")) or path
        found = Toolchain(path, cc, _version_line(path))
        _check_blocks(found)
        return found
    raise ObjCToolchainMissing("; ".join(problems) or "no clang++ found")


def _clang_version(path: str) -> tuple[int, int] | None:
    line = _version_line(path)
    match = re.search(r"clang version (\d+)\.(\d+)", line)
    return (int(match.group(1)), int(match.group(2))) if match else None


@functools.lru_cache(maxsize=None)
def _version_line(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else ""


def _check_blocks(found: Toolchain) -> None:
    """Block.h compiles and -lBlocksRuntime links (one tiny program, once per process)."""
    source = "#include <Block.h>\nint main() { void (^b)(void) = ^{}; b = Block_copy(b); Block_release(b); }\n"
    try:
        done = subprocess.run([found.cxx, "-fblocks", "-x", "c++", "-", "-o", os.devnull, "-lBlocksRuntime"],
                              input=source, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ObjCToolchainMissing(f"{found.cxx} could not be run ({error})") from error
    if done.returncode != 0:
        raise ObjCToolchainMissing(f"Block.h or libBlocksRuntime is missing ({done.stderr.strip()[-300:]})")


def framework_sources() -> list[Path]:
    """Every source compiled into the framework library, in a stable order."""
    return sorted(path for folder in FRAMEWORK_FOLDERS for pattern in SOURCE_PATTERNS
                  for path in (OBJC_DIR / folder).rglob(pattern) if path.is_file())


def compile_command(source: str | os.PathLike, *, sanitize: bool = False, include_dirs: Sequence[str] = (),
                    extra_flags: Sequence[str] = ()) -> list[str]:
    """The command (without ``-c``/``-o``) that compiles ``source`` for the framework or a program: clang++
    with the Objective-C flags for ``.mm``, clang for ``.m`` (no ``-std=c++17``) and ``.S``, clang++ without
    them for ``.cpp``."""
    tools = toolchain()
    suffix = Path(source).suffix
    optimise = ["-g", "-O1", *SANITIZE_FLAGS] if sanitize else ["-g", "-O2"]
    includes = [f"-I{INCLUDE_DIR}", *(f"-I{d}" for d in include_dirs)]
    if suffix == ".S":
        command = [tools.cc, "-fPIC", *optimise]
    elif suffix == ".m":
        command = [tools.cc, "-fPIC", "-std=gnu11", *OBJC_FLAGS, *optimise, *includes]
    elif suffix == ".cpp":
        command = [tools.cxx, "-fPIC", "-std=c++17", "-fblocks", "-fexceptions", *optimise, *includes]
    else:
        command = [tools.cxx, "-fPIC", "-std=c++17", *OBJC_FLAGS, *optimise, *includes]
    return command + list(extra_flags)


def compile_objects(sources: Sequence[str | os.PathLike], *, sanitize: bool = False,
                    include_dirs: Sequence[str] = (), extra_flags: Sequence[str] = ()) -> list[str]:
    """The objects of ``sources`` (each compiled by :func:`compile_command`), from the store or compiled now, for a
    library that another linker links: pass them with :func:`link_arguments`."""
    return _objects([str(s) for s in sources], sanitize, include_dirs, extra_flags)


def link_arguments(*, sanitize: bool = False) -> list[str]:
    """What a library or program made of :func:`compile_objects`' objects links with: the framework library (built
    now if need be; its folder on the run path) and the blocks runtime."""
    framework = framework_library(sanitize=sanitize)
    return [f"-L{framework.parent}", f"-Wl,-rpath,{framework.parent}", LIBRARY_FLAG, *LINK_LIBRARIES]


def _objects(sources: Sequence[str], sanitize: bool, include_dirs: Sequence[str] = (),
             extra_flags: Sequence[str] = ()) -> list[str]:
    store = default_store()

    def one(source: str) -> str:
        command = compile_command(source, sanitize=sanitize, include_dirs=include_dirs, extra_flags=extra_flags)
        return str(_object(store, command, source))

    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        return list(pool.map(one, sources))


def framework_library(*, sanitize: bool = False) -> Path:
    """``libshimkit_objc.so``: the runtime and frameworks, built (or found in the store) and returned. With
    ``sanitize``, the AddressSanitizer + UndefinedBehaviorSanitizer build, for programs built likewise."""
    tools = toolchain()
    sources = [str(path) for path in framework_sources()]
    link = ["-shared", f"-Wl,-soname,{LIBRARY_NAME}", *LINK_LIBRARIES]
    # A sanitized library takes the sanitizer runtimes from the program; a plain one must be complete.
    link += list(SANITIZE_FLAGS) if sanitize else ["-Wl,--no-undefined"]
    store = default_store()
    key = store.key("objc-framework", [tools.version, str(sanitize), *link, "\0",
                                       tree_digest(OBJC_DIR, ("*.h", *SOURCE_PATTERNS)),
                                       *(str(Path(s).relative_to(OBJC_DIR)) for s in sources)])

    def produce(staging: Path) -> None:
        objects = _objects(sources, sanitize)
        result = run_compiler([tools.cxx, *objects, "-o", str(staging / LIBRARY_NAME), *link])
        if result.returncode != 0:
            raise RuntimeError(f"linking {LIBRARY_NAME} failed:\n{shlex.join(result.args)}\n{result.stderr}")

    folder = store.build("objc-framework", key, produce,
                         inputs={"sanitize": str(sanitize), "sources": str(len(sources))})
    return folder / LIBRARY_NAME


def compile_objc(sources: Sequence[str | os.PathLike], output: str | os.PathLike, *, executable: bool = False,
                 sanitize: bool = False, include_dirs: Sequence[str] = (), extra_flags: Sequence[str] = ()) -> Path:
    """Compiles Objective-C++ (and C++) ``sources`` and links them with the framework library into ``output``:
    an executable when ``executable``, else a shared library; the framework's folder is on its run path.
    ``extra_flags`` go to the link and, but for libraries, objects and ``-l``/``-L``/``-Wl,`` options, to every
    compile (``-D`` macros, warnings). With ``sanitize``, the program and the framework are both built with
    ASan + UBSan (run the executable with :func:`sanitizer_environment`; a sanitized shared library loads only
    into a process with the ASan runtime preloaded). Objects are cached in the store; ``output`` is written
    every call. Returns ``output``."""
    tools = toolchain()
    compile_flags = [flag for flag in extra_flags if not _is_link_input(flag)]
    objects = _objects([str(s) for s in sources], sanitize, include_dirs, compile_flags)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [tools.cxx, *objects, "-o", str(output)]
    if not executable:
        command.append("-shared")
    command += [*link_arguments(sanitize=sanitize), *extra_flags]
    if sanitize:
        command += list(SANITIZE_FLAGS)
    result = run_compiler(command)
    if result.returncode != 0:
        raise RuntimeError(f"linking {output.name} failed:\n{shlex.join(result.args)}\n{result.stderr}")
    return output


def _is_link_input(flag: str) -> bool:
    """A library, object or linker option: for the link alone (the rest of ``extra_flags`` is for both)."""
    return flag.startswith(("-l", "-L", "-Wl,")) or flag.endswith((".so", ".a", ".o"))


def sanitizer_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the options a sanitized executable of
    :func:`compile_objc` runs under: leaks reported at exit, the first error fatal, symbolised stacks."""
    environment = dict(os.environ if base is None else base)
    environment["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:halt_on_error=1:symbolize=1:detect_stack_use_after_return=0"
    environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    environment["LSAN_OPTIONS"] = "report_objects=1"
    symbolizer = shutil.which("llvm-symbolizer-14") or shutil.which("llvm-symbolizer")
    if symbolizer:
        environment.setdefault("ASAN_SYMBOLIZER_PATH", symbolizer)
    return environment
