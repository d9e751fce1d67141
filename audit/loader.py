"""Turn a MODEL argument into something to audit.

A MODEL is a bundled zoo name (``mobilenet_v2``), ``path/to/file.py:factory`` where ``factory()``
returns ``(model, example_inputs)`` or ``(model, example_inputs, dynamic_shapes)`` (as
``torch.export.export`` takes them), or a saved ``.pt2`` ExportedProgram. Every way of getting it
wrong raises :class:`ModelLoadError` with a message that says what was expected.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


class ModelLoadError(ValueError):
    """A MODEL argument that names nothing loadable, or whose factory fails."""


@dataclass
class LoadedModel:
    """A model and example inputs (and ``torch.export`` dynamic shapes) to export, or an already
    exported program."""

    name: str
    model: Any = None
    example_inputs: tuple[Any, ...] = ()
    exported: torch.export.ExportedProgram | None = None
    dynamic_shapes: Any = None


def _from_factory(name: str, factory: Any, where: str) -> LoadedModel:
    try:
        produced = factory()
    except SystemExit as stop:  # sys.exit() in user code must end this model, not the whole audit
        raise ModelLoadError(f"{where}: the factory called sys.exit({stop.code!r})") from None
    except Exception as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        raise ModelLoadError(
            f"{where}: the factory raised {type(error).__name__}: {error} "
            f"(at {frame.filename}:{frame.lineno})") from error
    if not (isinstance(produced, tuple) and len(produced) in (2, 3)):
        raise ModelLoadError(
            f"{where}: the factory must return (model, example_inputs) or (model, example_inputs, "
            f"dynamic_shapes), got {type(produced).__name__}")
    model, example_inputs, *rest = produced
    dynamic_shapes = rest[0] if rest else None
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not callable(model):
        raise ModelLoadError(f"{where}: the model the factory returned ({type(model).__name__}) is not callable")
    if not isinstance(example_inputs, (tuple, list)):
        raise ModelLoadError(
            f"{where}: example_inputs must be a tensor or a tuple of inputs, got {type(example_inputs).__name__}")
    return LoadedModel(name, model=model, example_inputs=tuple(example_inputs), dynamic_shapes=dynamic_shapes)


def _load_file_factory(spec: str) -> LoadedModel:
    path_text, _, factory_name = spec.rpartition(":")
    path = Path(path_text)
    if not factory_name.isidentifier():
        raise ModelLoadError(f"{spec}: {factory_name!r} is not a Python identifier (expected file.py:factory)")
    if not path.is_file():
        raise ModelLoadError(f"{spec}: no such file {str(path)!r}")
    # A unique module name per path, so two files called model.py do not replace each other.
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"shimkit_audit_user_{path.stem}_{digest}"
    import_spec = importlib.util.spec_from_file_location(module_name, path)
    if import_spec is None or import_spec.loader is None:
        raise ModelLoadError(f"{spec}: {str(path)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = module
    try:
        import_spec.loader.exec_module(module)
    except SystemExit as stop:
        sys.modules.pop(module_name, None)
        raise ModelLoadError(f"{spec}: importing {str(path)!r} called sys.exit({stop.code!r})") from None
    except Exception as error:
        sys.modules.pop(module_name, None)
        frame = traceback.extract_tb(error.__traceback__)[-1]
        raise ModelLoadError(f"{spec}: importing {str(path)!r} raised {type(error).__name__}: {error} "
                             f"(at {frame.filename}:{frame.lineno})") from error
    factory = getattr(module, factory_name, None)
    if factory is None or not callable(factory):
        candidates = sorted(n for n, v in vars(module).items()
                            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        hint = f"; callables defined there: {', '.join(candidates)}" if candidates else ""
        raise ModelLoadError(f"{spec}: {str(path)!r} defines no callable {factory_name!r}{hint}")
    return _from_factory(spec, factory, spec)


def _load_exported(spec: str) -> LoadedModel:
    path = Path(spec)
    if not path.is_file():
        raise ModelLoadError(f"{spec}: no such file")
    try:
        exported = torch.export.load(str(path))
    except Exception as error:
        raise ModelLoadError(f"{spec}: not a loadable ExportedProgram ({type(error).__name__}: {error})") from error
    return LoadedModel(path.name, exported=exported)


def load_model(spec: str) -> LoadedModel:
    """Load one MODEL argument (zoo name, ``file.py:factory``, ``.pt2`` or a suite model such as
    ``transformers/bert``)."""
    from shimkit.audit.suites import build, is_suite_model
    from shimkit.audit.zoo import ZOO

    if spec.endswith(".pt2"):
        return _load_exported(spec)
    if ":" in spec and spec.rpartition(":")[0].endswith(".py"):
        return _load_file_factory(spec)
    if spec in ZOO:
        return _from_factory(spec, ZOO[spec].factory, f"zoo model {spec!r}")
    if is_suite_model(spec):
        return _from_factory(spec, lambda: build(spec), f"suite model {spec!r}")
    if spec.endswith(".py"):
        raise ModelLoadError(f"{spec}: name the factory too, as {spec}:factory")
    close = difflib.get_close_matches(spec, list(ZOO), n=3)
    suggestion = f" Did you mean {' or '.join(close)}?" if close else ""
    raise ModelLoadError(
        f"{spec!r} is not a zoo model, a file.py:factory or a .pt2 file.{suggestion} "
        f"Zoo models: {', '.join(ZOO)}.")
