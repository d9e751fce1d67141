"""What shimkit's stand-in of ExecuTorch's Metal runtime compiles, and how, without importing torch.

Every runtime compiles the *core* (:func:`core_sources`: the AOTI ABI over shimkit.metal and ExecuTorch
tensors, the fallbacks' common code, the SDK); a program's runtime adds the runtime's own fallback units whose
c-shims its wrapper calls (:func:`own_fallbacks`) and its plugins' adapters (``shimkit.runtime.program``).

Nothing here imports torch or ExecuTorch (their folders are found, not imported), so that ``shimkit audit
--execute`` can start compiling the core in a process of its own before it spends seconds importing them::

    python -m shimkit.runtime.sources        # the core's objects, into the artifact store
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
from pathlib import Path
from typing import Iterable

from shimkit.csrc.build import (PORTABLE_ROOTS, SANITIZER_FLAGS, compile_objects, package_folder, sanitize_requested,
                                sdk_sources, torch_include)

RUNTIME_DIR = Path(__file__).resolve().parent / "native"
# A fallback kernel of the runtime's own: a function it exports for the wrapper to call.
_EXPORTED_SHIM = re.compile(r"AOTI_TORCH_EXPORT\s+AOTITorchError\s+(aoti_torch_\w+)\s*\(")


# An ExecuTorch checkout whose own Metal runtime (backends/apple/metal/runtime, compiled against shimkit.objc by
# shimkit.runtime.upstream) programs link in place of the stand-in: ``shimkit audit --execute --metal-runtime DIR``.
METAL_RUNTIME_VARIABLE = "SHIMKIT_METAL_RUNTIME"
UPSTREAM_RUNTIME_FOLDER = Path("backends") / "apple" / "metal" / "runtime"


def metal_runtime_tree() -> Path | None:
    """The ExecuTorch checkout ``$SHIMKIT_METAL_RUNTIME`` names (None: unset, the stand-in runs programs); a value that
    is not one is a ValueError naming the variable and what is missing."""
    value = os.environ.get(METAL_RUNTIME_VARIABLE)
    if not value:
        return None
    return checked_metal_runtime_tree(value, METAL_RUNTIME_VARIABLE)


def checked_metal_runtime_tree(value: str | os.PathLike, what: str) -> Path:
    """``value`` resolved, if it is an ExecuTorch checkout with a Metal runtime; a ValueError naming ``what`` if not."""
    tree = Path(value).expanduser().resolve()
    if not (tree / UPSTREAM_RUNTIME_FOLDER).is_dir():
        raise ValueError(f"{what}={str(value)!r}: not an ExecuTorch checkout (it has no {UPSTREAM_RUNTIME_FOLDER})")
    return tree


@functools.lru_cache(maxsize=1)
def own_fallbacks() -> dict[str, frozenset[str]]:
    """The runtime's fallback units that export c-shims, each with the shims it exports: a program's runtime
    compiles those its wrapper calls (the others, such as the fallbacks' common code, always)."""
    units = {}
    for path in sorted((RUNTIME_DIR / "fallbacks").glob("*.cpp")):
        shims = frozenset(_EXPORTED_SHIM.findall(path.read_text()))
        if shims:
            units[str(path)] = shims
    return units


def core_sources() -> list[str]:
    """What every runtime compiles: the AOTI ABI over shimkit.metal and ExecuTorch tensors, the fallbacks'
    common code, the SDK."""
    own = [*RUNTIME_DIR.glob("*.cpp"), *(RUNTIME_DIR / "fallbacks").glob("*.cpp")]
    return sorted(str(p) for p in own if str(p) not in own_fallbacks()) + sdk_sources()


def runtime_sources(adapters: Iterable[str], fallbacks: Iterable[str] | None = None) -> list[str]:
    """The core, the runtime's own fallback units (``fallbacks``; None: all of them) and ``adapters``."""
    chosen = sorted(own_fallbacks()) if fallbacks is None else sorted(fallbacks)
    return core_sources() + chosen + list(adapters)


def compile_arguments() -> dict:
    """How the runtime's units compile: :func:`~shimkit.csrc.build.compile_shared_library`'s and
    :func:`~shimkit.csrc.build.compile_objects`' arguments (with ``SHIMKIT_SANITIZE=1``, the sanitizers')."""
    flags = ["-O2", "-fvisibility=default", "-pthread", f"-iquote{PORTABLE_ROOTS['<checkout>']}"]
    if sanitize_requested():
        flags += list(SANITIZER_FLAGS)
    include = [RUNTIME_DIR / "include", RUNTIME_DIR, package_folder("executorch") / "include", torch_include()]
    return {"include_dirs": [str(folder) for folder in include],
            "define_macros": [("C10_USING_CUSTOM_GENERATED_MACROS", "1")], "extra_flags": flags}


def compile_core() -> None:
    """The core's objects, compiled into the artifact store (or found there)."""
    compile_objects(core_sources(), **compile_arguments())


if __name__ == "__main__":
    # Stopped by the process that started it: a clean exit, so that a compile under way is stopped with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    compile_core()
