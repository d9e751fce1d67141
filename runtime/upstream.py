"""ExecuTorch's own Metal runtime, built from an ExecuTorch source tree against shimkit.objc (issue 67, part 4).

:func:`build_upstream_runtime` compiles every ``.mm`` and ``.cpp`` of ``backends/apple/metal/runtime`` and
``backends/aoti/common_shims.cpp`` of a tree with shimkit.objc's clang (Metal and MPSGraph on the CPU), with the
glue of ``runtime/upstream_glue`` and the stand-in's MSL dispatch (``runtime/native/metal_dispatch.cpp``), into one
shared library that :func:`shimkit.runtime.program.load_runtime` loads as it loads the stand-in: upstream's
``aoti_torch_*`` functions and fallback shims, and the host's hooks (``shimkit_runtime_set_resolver`` registers the
MSL compiler that Metal's ``newLibraryWithSource:`` reaches through the glue's shader backend;
``shimkit_runtime_take_failure`` reports upstream's first ``ET_LOG(Error, ...)`` message as well as the dispatch's
failures).

Each source is one object of the artifact store (cached as :func:`shimkit.objc.build.compile_objc` caches them). A
source that does not compile is left out of the library and reported with the compiler's first error
(:class:`UpstreamBuild`), never silently; where the library cannot be linked without it, :class:`UpstreamBuildError`
says so with the whole report.

Nothing of the tree is copied into shimkit: it is compiled where it lies, its ``backends`` folder reached through a
link at ``executorch/backends`` in a folder of the store, the include path its sources are written for.
"""

from __future__ import annotations

import os
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shimkit.csrc.build import (PORTABLE_ROOTS, SOURCE_DIR, _object, package_folder, run_compiler, sanitize_requested,
                                sdk_sources, torch_include)
from shimkit.objc.build import LIBRARY_FLAG, LINK_LIBRARIES, SANITIZE_FLAGS, compile_command, framework_library, \
    toolchain
from shimkit.runtime.sources import RUNTIME_DIR
from shimkit.store import KEY_CHARS, EnvironmentFailure, default_store, digest_of

GLUE_DIR = Path(__file__).resolve().parent / "upstream_glue"
RUNTIME_FOLDER = Path("backends/apple/metal/runtime")
AOTI_SOURCES = (Path("backends/aoti/common_shims.cpp"),)
# What upstream's sources assume of Apple's toolchain: ExecuTorch's generated c10 macros, RTTI (dynamic_cast in
# memory.cpp), and <mutex> reached through other headers (libc++ on a Mac includes it where libstdc++ does not).
UPSTREAM_FLAGS = ("-DC10_USING_CUSTOM_GENERATED_MACROS=1", "-frtti", "-include", "mutex")
# The dispatch and the shader backend are shimkit's own units: their headers, not upstream's.
DISPATCH_SOURCES = (RUNTIME_DIR / "metal_dispatch.cpp", GLUE_DIR / "shader_backend.cpp")
DISPATCH_INCLUDES = (RUNTIME_DIR / "include", RUNTIME_DIR)


class UpstreamBuildError(RuntimeError):
    """The upstream runtime could not be built into a library: the tree is not an ExecuTorch tree, or the link
    failed. The message names the file at fault and holds the build report."""


@dataclass(frozen=True)
class UpstreamSource:
    """One upstream source: its path relative to the tree, whether it is in the library, and if not why (the
    compiler's first error line)."""

    path: str
    built: bool
    reason: str = ""


@dataclass(frozen=True)
class UpstreamBuild:
    """A built upstream runtime: the library and what became of each upstream source."""

    library: Path
    tree: Path
    sources: tuple[UpstreamSource, ...]

    @property
    def not_built(self) -> tuple[UpstreamSource, ...]:
        return tuple(source for source in self.sources if not source.built)

    def report(self) -> str:
        """The build report, a markdown table: every upstream source, built or not and why."""
        lines = ["| upstream source | built | reason |", "| --- | --- | --- |"]
        for source in self.sources:
            reason = source.reason.replace("|", "\\|")
            lines.append(f"| `{source.path}` | {'yes' if source.built else 'NO'} | {reason} |")
        return "\n".join(lines)


def upstream_sources(tree: Path) -> list[Path]:
    """Every upstream source the library is made of, relative to ``tree``: the Metal runtime's ``.mm`` and ``.cpp``
    files and the AOTI shims they use. :class:`UpstreamBuildError` where ``tree`` lacks them."""
    runtime = tree / RUNTIME_FOLDER
    if not runtime.is_dir():
        raise UpstreamBuildError(f"{tree} is not an ExecuTorch source tree: {runtime} is not a folder")
    missing = [str(tree / path) for path in AOTI_SOURCES if not (tree / path).is_file()]
    if missing:
        raise UpstreamBuildError(f"{tree} lacks {', '.join(missing)} (extract backends/aoti of the same commit)")
    found = sorted(path.relative_to(tree) for pattern in ("*.mm", "*.cpp") for path in runtime.rglob(pattern)
                   if path.is_file())
    return found + list(AOTI_SOURCES)


def upstream_runtime_library(tree: Path, adapters: Sequence[str] = (), generated: str = "") -> Path:
    """The library :func:`build_upstream_runtime` builds (see there)."""
    return build_upstream_runtime(tree, adapters, generated).library


def build_upstream_runtime(tree: Path, adapters: Sequence[str] = (), generated: str = "") -> UpstreamBuild:
    """Builds ExecuTorch's Metal runtime of ``tree`` (an ExecuTorch source tree) with shimkit.objc, the glue,
    ``adapters`` (plugin adapter sources, ``.mm`` or ``.cpp``, each compiled as Objective-C++) and ``generated``
    (more C++ source text), into a library with a soname of its own (a digest of its objects: a process binds a
    ``DT_NEEDED`` name to the first library of that name it loaded). With ``SHIMKIT_SANITIZE=1``, built with the
    sanitizers, as the stand-in is. Returns the library and the report of every upstream source."""
    tree = Path(tree).resolve()
    relative = upstream_sources(tree)
    sanitize = sanitize_requested()
    framework = framework_library(sanitize=sanitize)
    includes = [str(GLUE_DIR / "include"), str(_include_root(tree)), str(package_folder("executorch") / "include"),
                str(torch_include())]

    def upstream_object(source: Path) -> Path:
        command = compile_command(source, sanitize=sanitize, include_dirs=includes, extra_flags=UPSTREAM_FLAGS)
        return _object(default_store(), command, str(source))

    def own_object(source: Path, include_dirs: Sequence[str]) -> Path:
        return _object(default_store(), compile_command(source, sanitize=sanitize, include_dirs=include_dirs),
                       str(source))

    def extra_object(source: Path) -> Path:
        command = compile_command(source, sanitize=sanitize, include_dirs=[*includes, str(SOURCE_DIR / "include")],
                                  extra_flags=[*UPSTREAM_FLAGS, f"-iquote{PORTABLE_ROOTS['<checkout>']}"])
        return _object(default_store(), command, str(source))

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        upstream = {path: pool.submit(upstream_object, tree / path) for path in relative}
        own = [pool.submit(own_object, source, [str(d) for d in DISPATCH_INCLUDES]) for source in DISPATCH_SOURCES]
        own.append(pool.submit(upstream_object, GLUE_DIR / "hooks.mm"))
        extras = [_objc_unit(path) for path in adapters] + ([_saved(generated, "generated.mm")] if generated else [])
        if extras:  # plugin adapters include shimkit's SDK headers and need its implementation
            extras += [Path(source) for source in sdk_sources()]
        own += [pool.submit(extra_object, source) for source in extras]
        objects = [str(future.result()) for future in own]
        sources = []
        for path, future in upstream.items():
            try:
                objects.append(str(future.result()))
                sources.append(UpstreamSource(str(path), True))
            except EnvironmentFailure:
                raise  # the machine's fault (no compiler, a full disk), no verdict on the source
            except RuntimeError as error:
                sources.append(UpstreamSource(str(path), False, _first_error(str(error))))
    return UpstreamBuild(_link(objects, framework, sanitize, sources, tree), tree, tuple(sources))


def _link(objects: list[str], framework: Path, sanitize: bool, sources: list[UpstreamSource], tree: Path) -> Path:
    tools = toolchain()
    executorch_lib = package_folder("executorch") / "lib"
    link = [f"-L{framework.parent}", f"-Wl,-rpath,{framework.parent}", LIBRARY_FLAG, f"-L{executorch_lib}",
            f"-Wl,-rpath,{executorch_lib}", "-lexecutorch", "-ldl", *LINK_LIBRARIES, "-Wl,-Bsymbolic"]
    # A sanitized library takes the sanitizer runtimes from the process; a plain one must be complete.
    link += list(SANITIZE_FLAGS) if sanitize else ["-Wl,--no-undefined"]
    # Objects are named by their contents' keys: the list names the library's contents.
    identity = digest_of([tools.version, str(framework), *link, *objects])
    name = f"shimkit-metal-upstream-{identity[:KEY_CHARS]}"
    store = default_store()

    def produce(staging: Path) -> None:
        result = run_compiler([tools.cxx, "-shared", *objects, "-o", str(staging / f"lib{name}.so"),
                               f"-Wl,-soname,lib{name}.so", *link])
        if result.returncode != 0:
            left_out = [s.path for s in sources if not s.built]
            raise UpstreamBuildError(
                f"linking ExecuTorch's Metal runtime of {tree} failed"
                + (f" (left out, as they did not compile: {', '.join(left_out)})" if left_out else "")
                + f":\n{_first_error(result.stderr)}\n"
                + shlex.join(result.args)[:2000] + "\n" + UpstreamBuild(Path(), tree, tuple(sources)).report())

    return store.build("upstream-runtime", store.key("upstream-runtime", [identity]), produce,
                       inputs={"tree": str(tree)}) / f"lib{name}.so"


def _include_root(tree: Path) -> Path:
    """A folder of the store holding ``executorch/backends``, a link to ``tree``'s: upstream's sources include
    their own headers as ``<executorch/backends/...>``, beside the wheel's ``executorch/runtime``."""
    root = default_store().checked_root() / "upstream-include" / digest_of([str(tree)])[:KEY_CHARS]
    link = root / "executorch" / "backends"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        # Made under a name of this process and renamed: workers building at once each make a whole link.
        temporary = link.with_name(f".backends-{os.getpid()}")
        if temporary.is_symlink():
            temporary.unlink()
        temporary.symlink_to(tree / "backends", target_is_directory=True)
        os.replace(temporary, link)
    return root


def _objc_unit(path: str) -> Path:
    """A unit that ``#include``-s the adapter ``path``, so that it compiles as Objective-C++ whatever its suffix
    and the compiler's messages name the adapter's own file and line."""
    if not Path(path).is_absolute() or any(c in path for c in '"\\\n\r\0'):
        raise ValueError(f"adapter path {path!r} cannot be #include-d (relative, or a quote, backslash, line "
                         f"break or NUL in it)")
    return _saved(f'#include "{path}"\n', "adapter.mm")


def _saved(text: str, name: str) -> Path:
    """``text`` saved as ``name`` in the artifact store, named by its digest."""
    store = default_store()

    def produce(staging: Path) -> None:
        (staging / name).write_text(text)

    return store.build("source", store.key("source", [name, text]), produce) / name


_ERROR_LINE = re.compile(r"^.*(?:: (?:fatal )?error: |undefined reference).*$", re.MULTILINE)


def _first_error(text: str) -> str:
    """The compiler's or linker's first error line in ``text``."""
    lines = [line.strip() for line in _ERROR_LINE.findall(text)]
    return lines[0] if lines else (text.strip().splitlines() or ["no message"])[-1]
