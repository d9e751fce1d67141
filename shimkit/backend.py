"""Assembling a backend: the layer above the registry, the passes and the built-in plugins.

:mod:`shimkit.registry` is the plugin-author contract and discovery only; it is handed the built-in
plugins and imports neither :mod:`shimkit.passes` nor :mod:`shimkit.plugins`. This module puts them
together: the process-wide registry (built-ins plus entry points), a device's derived configuration,
its pass pipeline and its AOTInductor options.

>>> from shimkit.backend import backend_config, inductor_options, pipeline
>>> "aoti_torch_mps_mm_out" in backend_config("mps").fallback_kernels
True
>>> pipeline("mps").names
['decompose_linear', 'addmm_to_mm', 'complex_pairs', 'plugin_decompositions', 'view_copy_to_view']
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Mapping

import torch

from shimkit.passes import Pipeline
from shimkit.plugins import BUILTIN_MODULES, BUILTIN_PACKAGE
from shimkit.registry import BackendConfig, PluginRegistry
from shimkit.registry.ops import try_resolve_op

__all__ = ["BUILTIN_PLUGINS", "backend_config", "get_registry", "inductor_options", "new_registry", "pipeline",
           "use_registry"]

BUILTIN_PLUGINS = tuple(f"{BUILTIN_PACKAGE}.{name}" for name in BUILTIN_MODULES)

_lock = threading.Lock()
_current: PluginRegistry | None = None


def new_registry(env: Mapping[str, str] | None = None) -> PluginRegistry:
    """A registry with shimkit's built-in plugins and (unless ``env`` disables autoload) the
    entry points; ``env`` defaults to ``os.environ``."""
    return PluginRegistry(env, builtins=BUILTIN_PLUGINS)


def get_registry() -> PluginRegistry:
    """The process-wide registry, created from ``os.environ`` on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = new_registry()
        return _current


@contextlib.contextmanager
def use_registry(registry: PluginRegistry | None = None, *, env: Mapping[str, str] | None = None
                 ) -> Iterator[PluginRegistry]:
    """Make ``registry`` (or a fresh one built from ``env``) the process-wide one for a block."""
    global _current
    replacement = registry if registry is not None else new_registry(env)
    with _lock:
        previous, _current = _current, replacement
    try:
        yield replacement
    finally:
        with _lock:
            _current = previous


def backend_config(device: str, registry: PluginRegistry | None = None) -> BackendConfig:
    """The configuration for ``device`` (``"mps"`` or ``"cuda"``) derived from ``registry``'s active
    plugins (default: the process-wide registry)."""
    return (registry or get_registry()).backend_config(device)


def pipeline(device: str, registry: PluginRegistry | None = None, **kwargs: Any) -> Pipeline:
    """The graph-stage passes the active plugins contribute for ``device``, in order, as one
    :class:`~shimkit.passes.Pipeline` (``kwargs`` as for ``Pipeline``: ``check=True`` ...)."""
    config = backend_config(device, registry)
    return Pipeline(list(zip(config.pass_names, config.passes)), name=f"{device}_passes", **kwargs)


# The ops whose operands' layout Inductor chooses itself when its layout optimisation is on: it hands a convolution
# channels-last input and weight and expects a channels-last result (torch/_inductor/graph.py, decide_layout_opt).
_LAID_OUT_BY_INDUCTOR = frozenset({torch.ops.aten.convolution.default})


def inductor_options(config: BackendConfig) -> dict[str, Any]:
    """AOTInductor options to merge into the backend's own: the custom c-shims, the post-grad passes (as one
    ``post_grad_custom_post_pass``), and what makes the program hand a shim the dense operands it reads through
    their sizes alone (``Shim.dense_operands``: the stock runtime's convolution reads channels-last memory as NCHW,
    pytorch/executorch#22951; its mm reads ``self`` as a dense matrix): each such operand handed through Inductor's
    stride-order prim with contiguous strides (``shimkit.passes.dense_operands``, last of the post-grad passes; a
    copy only where the memory really is laid out otherwise), and Inductor's layout optimisation off where it would
    lay out those operands itself; on Metal, every ``cat`` one pointwise kernel (no kernel writes into a view with
    holes, which the runtime would copy)."""
    # Imported here, not at the top: it pulls in torch._inductor (a second of start-up), which
    # `shimkit plugins` and `shimkit config` never need.
    from shimkit.passes.inductor import PostGradPipeline

    from shimkit.passes.dense_operands import ContiguousOperands

    options: dict[str, Any] = {}
    if config.custom_c_shims:
        options["aot_inductor.custom_ops_to_c_shims"] = dict(config.custom_c_shims)
    dense = dense_operands(config)
    passes, names = tuple(config.post_grad_passes), tuple(config.post_grad_pass_names)
    if dense:  # last: after every pass that may still make a call of these ops
        passes, names = passes + (ContiguousOperands(dense),), names + (ContiguousOperands.name,)
    if passes:
        options["post_grad_custom_post_pass"] = PostGradPipeline(passes, names)
    if any(op in _LAID_OUT_BY_INDUCTOR for op in dense):
        options["layout_optimization"] = False
    if config.device == "mps":
        # ExecuTorch's Metal runtime copies a view with holes into a new buffer at _reinterpret_tensor
        # (memory.cpp:530-561), so a kernel writing into one writes into the copy: Inductor's cat, which has its
        # inputs' kernels write into views of its output (ConcatKernel), must be one pointwise kernel instead.
        options["force_pointwise_cat"] = True
    return options


def dense_operands(config: BackendConfig) -> dict[torch._ops.OpOverload, tuple[str, ...]]:
    """The ops whose chosen shim reads operands as dense memory of their sizes (``Shim.dense_operands``), with those
    operands' names: what ``inductor_options`` makes the generated program hand over contiguous."""
    found: dict[torch._ops.OpOverload, tuple[str, ...]] = {}
    for provision in config.kernel_providers.values():
        shim = provision.shim
        if shim is None or not shim.dense_operands:
            continue
        overload = try_resolve_op(shim.op)
        if overload is not None:
            found[overload] = shim.dense_operands
    return found
