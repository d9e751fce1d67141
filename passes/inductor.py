"""The Inductor side: shimkit's post-grad passes as one ``post_grad_custom_post_pass``.

Inductor's post-grad pattern pass re-fuses ``mm`` + bias into ``addmm`` after every graph-level
rewrite (docs/metal-aoti.md, "The mm + bias → addmm fusion"); ``post_grad_custom_post_pass`` runs after those patterns, so it is where an
``addmm`` the device cannot run is taken apart again. :class:`PostGradPipeline` runs the registry's
``stage="post_grad"`` passes there, in order; ``shimkit.backend.inductor_options(config)`` puts it in the
AOTInductor options.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any, Sequence

from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from shimkit.passes.pipeline import Pipeline

_PASSES_DIR = Path(__file__).resolve().parent


class PostGradPipeline(CustomGraphPass):
    """A ``CustomGraphPass`` running ``passes`` (named ``names``) on Inductor's post-grad graph.

    ``uuid()`` keys Inductor's FX graph cache: it changes when shimkit's pass sources, the pass list
    or any pass's configuration (for instance which decomposition it applies) changes.
    """

    def __init__(self, passes: Sequence[Any], names: Sequence[str] | None = None) -> None:
        names = list(names) if names is not None else [getattr(p, "pass_name", type(p).__name__) for p in passes]
        if len(names) != len(passes):
            raise ValueError(f"PostGradPipeline got {len(passes)} passes but {len(names)} names")
        self.pipeline = Pipeline(list(zip(names, passes)), name="post_grad")

    def __call__(self, graph: fx.Graph) -> None:
        self.pipeline(graph)

    @property
    def report(self):
        return self.pipeline.report

    def uuid(self) -> bytes:
        sources = tuple(sorted(str(p) for p in _PASSES_DIR.glob("*.py")))
        digest = hashlib.sha256(get_hash_for_files(sources))
        for name, item in self.pipeline.passes:
            digest.update(name.encode())
            digest.update(_configuration(item).encode())
        return digest.digest()


def _configuration(item: Any) -> str:
    """What distinguishes one configured pass from another, as text that is stable across processes."""
    parts = [f"{type(item).__module__}.{type(item).__qualname__}"]
    for key, value in sorted(vars(item).items()):
        if key.startswith("_") or key == "report":
            continue
        parts.append(f"{key}={_describe(value)}")
    return ";".join(parts)


def _describe(value: Any) -> str:
    if callable(value) and hasattr(value, "__qualname__"):
        try:
            source = inspect.getsource(value)
        except (OSError, TypeError):
            source = ""
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}#{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_describe(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_describe(v) for v in value) + "]"
    return repr(value)
