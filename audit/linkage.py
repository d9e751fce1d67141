"""Which runtime functions a generated Metal program calls that ExecuTorch's Metal runtime lacks: the plain
audit's prediction of what ``--execute`` finds when it links the program (``Unlinkable``).

Kernels are judged by name against the backend's supported list (:mod:`~shimkit.audit.recorder`). Besides
them the wrapper calls the runtime's own AOTI API, and one family of those calls depends on the model: reading
a size no one knew before the program ran (``nonzero``'s row count) goes through
:data:`~shimkit.audit.recorder.ACCESSORS`, and ExecuTorch's Metal runtime has ``aoti_torch_get_sizes`` but not
``aoti_torch_get_size``. What the runtime has is read from shimkit's stand-in headers, written from
upstream's public declarations (``backends/aoti/common_shims.h``, the Metal shims), plus what an active
plugin's runtime sources define.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Iterable

import shimkit.runtime
from shimkit.audit.recorder import KernelCall

RUNTIME_HEADERS = Path(shimkit.runtime.__file__).resolve().parent / "native" / "include"


@functools.lru_cache(maxsize=1)
def runtime_api() -> frozenset[str]:
    """The ``aoti_torch_*`` functions ExecuTorch's Metal runtime declares (as the stand-in's headers copy them)."""
    named = re.compile(r"\b(aoti_torch_\w+)\s*\(")
    return frozenset(name for header in sorted(RUNTIME_HEADERS.rglob("*.h"))
                     for name in named.findall(header.read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=64)
def _defined_in(path: str, name: str) -> bool:
    """Whether the C/C++ source ``path`` defines function ``name`` (a body, not a declaration)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:  # a source a plugin names but lacks: the runtime build reports it, not the audit
        return False
    return re.search(rf"\b{re.escape(name)}\s*\([^;{{]*\)\s*\{{", text) is not None


def unserved(calls: Iterable[KernelCall], config: Any | None) -> list[KernelCall]:
    """The runtime calls among ``calls`` that neither the runtime's API nor a runtime source of ``config``'s
    plugins (``None``: stock, none) provides: the program would not link on a Mac."""
    sources = config.kernel_sources if config is not None else ()
    return [call for call in calls if call.name not in runtime_api()
            and not any(_defined_in(source, call.name) for source in sources)]
