"""What makes a split cheap to repeat: libclang's precompiled ``metal_stdlib``, kept in the artifact store,
and the digest of everything that decides what the splitter writes (the key of its store entries)."""

from __future__ import annotations

import functools
from pathlib import Path

from shimkit.csrc.build import run_compiler
from shimkit.store import Store, digest_of, tree_digest

FORMAT = "3"


@functools.lru_cache(maxsize=None)
def headers_digest(include_dir: Path) -> str:
    """The splitter's headers and the modules of shimkit.metal (the splitter's passes and the readers they
    use), which decide what it writes."""
    return digest_of([tree_digest(include_dir / "shimkit_metal", ("*.h",)),
                      tree_digest(Path(__file__).parents[1], ("*.py",))])


@functools.lru_cache(maxsize=None)
def precompiled_stdlib(include_dir: Path, args: tuple[str, ...], store: Store) -> Path | None:
    """``metal_stdlib`` parsed once by libclang and saved (a precompiled header) for every later parse
    with ``args``; None where libclang cannot save one. Parsing the header and the standard headers it
    needs was 0.5 s of every kernel's split, the rest 10 to 50 ms. Keyed by libclang's version text (its
    ``CXString`` printed as an int was a new number per process: a new 12 MB header each)."""
    from clang import cindex

    class Unsaved(Exception):
        pass

    def produce(staging: Path) -> None:
        unit = cindex.Index.create().parse(str(include_dir / "metal_stdlib"), args=["-x", "c++-header", *args])
        try:
            unit.save(str(staging / "metal_stdlib.pch"))
        except cindex.TranslationUnitSaveError as error:
            raise Unsaved from error

    key = store.key("libclang-pch", [FORMAT, headers_digest(include_dir), libclang_version(), *args])
    try:
        return store.build("libclang-pch", key, produce) / "metal_stdlib.pch"
    except Unsaved:
        return None


@functools.lru_cache(maxsize=1)
def libclang_version() -> str:
    from clang import cindex

    version = cindex.conf.lib.clang_getClangVersion
    version.restype = cindex._CXString  # the bindings leave it an int: the address of the string
    return cindex._CXString.from_result(version())


@functools.lru_cache(maxsize=None)
def system_include(compiler: tuple[str, ...]) -> str:
    done = run_compiler([*compiler, "-print-file-name=include"])
    return done.stdout.strip()
