"""Turn a MODEL argument into something to audit.

A MODEL is a bundled zoo name (``mobilenet_v2``), ``path/to/file.py:factory`` where ``factory()``
returns ``(model, example_inputs)`` or ``(model, example_inputs, dynamic_shapes)`` (as
``torch.export.export`` takes them), or a saved ``.pt2`` ExportedProgram. Every way of getting it
wrong raises :class:`ModelLoadError` with a message that says what was expected.

A factory may return a program of several methods, as ExecuTorch's ``.pte`` holds them (Whisper's encoder and
text decoder): a dict of method name to ``(model, example_inputs[, dynamic_shapes])`` or to the
``ExportedProgram`` an exporter made (optimum-executorch's ``export()`` returns such a dict), or a :class:`Program`
of those with the exporter's own lowering settings (:class:`Lowering`). Each method is audited as a model of its own
named ``MODEL#method`` (:func:`load_methods`); ``MODEL#method`` names one.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import sympy
import torch

from shimkit.audit.names import Renaming
from shimkit.audit.programs import Lowering, Program


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
    # The names of ``exported`` that generated code could not carry and their stand-ins (audit/names.py)
    renaming: Renaming = field(default_factory=Renaming)
    # The method of a program of several this is (``"encoder"``; its name is then ``MODEL#encoder``), else None
    method: str | None = None
    # How its exporter lowers it (stock to_edge_transform_and_lower unless a factory's Program says otherwise)
    lowering: Lowering | None = None


# What ``MODEL#method`` may name: a method of an ExecuTorch program is a Python identifier.
_METHOD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def split_method(spec: str) -> tuple[str, str | None]:
    """``("file.py:make", "decoder")`` for ``"file.py:make#decoder"``; ``(spec, None)`` where ``spec`` names no method.

    >>> split_method("whisper.py:make#decoder"), split_method("models/a#b.py:make")
    (('whisper.py:make', 'decoder'), ('models/a#b.py:make', None))
    """
    program, hash_mark, method = spec.rpartition("#")
    if hash_mark and program and _METHOD.fullmatch(method):
        return program, method
    return spec, None


def _at(error: BaseException) -> str:
    """`` (at FILE:LINE: code)``: the user's line that raised (not importlib's, not the loader's), if any."""
    from shimkit.audit.recorder import raised_at

    where = raised_at(error)
    return f" (at {where.file}:{where.line}: {where.code})" if where and where.code else \
        f" (at {where.file}:{where.line})" if where else ""


def _from_factory(name: str, factory: Any, where: str) -> LoadedModel | list[LoadedModel]:
    # Built from a config, a model's weights are random: seeded, two audits of it judge the same weights and
    # generate the same program (Inductor folds small constants into the code, so a program of other weights
    # is another build), and the caller's random state is left as it was.
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            produced = factory()
    except SystemExit as stop:  # sys.exit() in user code must end this model, not the whole audit
        raise ModelLoadError(f"{where}: the factory called sys.exit({stop.code!r})") from None
    except Exception as error:
        raise ModelLoadError(f"{where}: the factory raised {type(error).__name__}: {error}{_at(error)}") from error
    if isinstance(produced, Program):
        if not isinstance(produced.methods, Mapping):
            raise ModelLoadError(f"{where}: Program.methods must map method names to methods, got "
                                 f"{type(produced.methods).__name__}")
        methods = _methods(name, dict(produced.methods), where)
        for method in methods:
            method.lowering = produced.lowering
        return methods
    if isinstance(produced, dict):
        return _methods(name, produced, where)
    return _one_method(name, produced, where)


def _methods(name: str, produced: dict, where: str) -> list[LoadedModel]:
    """Each method of a program of several, named ``name#method``, in the factory's order."""
    from shimkit.audit.names import make_pasteable

    if not produced:
        raise ModelLoadError(f"{where}: the factory returned a dict of no methods")
    methods = []
    for method, value in produced.items():
        if not isinstance(method, str) or not _METHOD.fullmatch(method):
            raise ModelLoadError(f"{where}: method name {method!r} is not an identifier (ExecuTorch calls a "
                                 f"program's methods by such names: 'encoder', 'text_decoder')")
        entry = f"{name}#{method}"
        if isinstance(value, torch.export.ExportedProgram):
            # Pasteable first: making keyword inputs positional runs the program's module, names and guards.
            try:
                renaming = make_pasteable(value, entry)
            except Exception as error:
                raise ModelLoadError(f"{where}: method {method!r}: {error}") from None
            loaded = LoadedModel(entry, exported=_positional(value, f"{where}: method {method!r}"), method=method,
                                 renaming=renaming)
        else:
            loaded = _one_method(entry, value, f"{where}: method {method!r}")
            loaded.method = method
        methods.append(loaded)
    return methods


def _positional(exported: torch.export.ExportedProgram, where: str) -> torch.export.ExportedProgram:
    """``exported`` taking its inputs flat and in order, as ExecuTorch's runtime calls a method: an exporter's keyword
    inputs (optimum-executorch's causal LM is exported with ``input_ids=`` and ``cache_position=``) become positional
    ones, the program and its dynamic sizes unchanged."""
    from torch.utils import _pytree as pytree

    args, kwargs = exported.example_inputs
    if not kwargs:
        return exported
    flat, spec = pytree.tree_flatten((args, kwargs))
    method = exported.module()

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.method = method

        def forward(self, *inputs: Any) -> Any:
            positional, keywords = pytree.tree_unflatten(list(inputs), spec)
            return self.method(*positional, **keywords)

    # Each input keeps its name in the program it becomes (reports say "cache_position.shape[0]=4").
    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    Positional.forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", parameter)]
        + [inspect.Parameter(name, parameter) for name in exported.graph_signature.user_inputs])
    try:
        with torch.no_grad():
            return torch.export.export(Positional(), tuple(flat), dynamic_shapes=_dynamic_shapes(exported),
                                       strict=False)
    except Exception as error:
        raise ModelLoadError(f"{where}: its keyword inputs ({', '.join(kwargs)}) could not be made positional "
                             f"({type(error).__name__}: {error})") from error


def _dynamic_shapes(exported: torch.export.ExportedProgram) -> tuple[Any, ...]:
    """``exported``'s user inputs' dynamic sizes as ``torch.export`` takes them, one entry per flat input (a size
    two inputs share is one ``Dim``)."""
    nodes = {node.name: node for node in exported.graph.nodes if node.op == "placeholder"}
    dims: dict[Any, Any] = {}
    shapes = []
    for name in exported.graph_signature.user_inputs:
        value = nodes[name].meta.get("val")
        sizes = {}
        for axis, size in enumerate(getattr(value, "shape", ())):
            if isinstance(size, torch.SymInt) and not isinstance(size.node.expr, sympy.Integer):
                symbol = size.node.expr
                if symbol not in dims:
                    bounds = exported.range_constraints[symbol]
                    upper = None if bounds.upper.is_infinite else int(bounds.upper)
                    dims[symbol] = torch.export.Dim(f"{name}_{axis}", min=int(bounds.lower), max=upper)
                sizes[axis] = dims[symbol]
        shapes.append(sizes or None)
    return tuple(shapes)


def _one_method(name: str, produced: Any, where: str) -> LoadedModel:
    if not (isinstance(produced, tuple) and len(produced) in (2, 3)):
        raise ModelLoadError(
            f"{where}: the factory must return (model, example_inputs) or (model, example_inputs, "
            f"dynamic_shapes), or a dict of method name to those or to an ExportedProgram (or a Program of "
            f"them), got {type(produced).__name__}")
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


def _readable_file(spec: str, path: Path) -> None:
    """Raise :class:`ModelLoadError` naming ``path`` unless it is a regular file this process may read."""
    import os
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ModelLoadError(f"{spec}: no such file {str(path)!r}") from None
    except OSError as error:  # a name longer than NAME_MAX, a component that is not a folder, a loop
        raise ModelLoadError(f"{spec}: the path {str(path)!r} cannot be used: {error.strerror or error}") from None
    if stat.S_ISDIR(mode):
        raise ModelLoadError(f"{spec}: {str(path)!r} is a directory, not a file")
    if not stat.S_ISREG(mode):  # a FIFO would block the read forever, a device read without end
        raise ModelLoadError(f"{spec}: {str(path)!r} is not a regular file")
    if not os.access(path, os.R_OK):
        raise ModelLoadError(f"{spec}: {str(path)!r} cannot be read (permission denied)")


def _load_file_factory(spec: str) -> LoadedModel | list[LoadedModel]:
    path_text, _, factory_name = spec.rpartition(":")
    path = Path(path_text)
    if not factory_name.isidentifier():
        raise ModelLoadError(f"{spec}: {factory_name!r} is not a Python identifier (expected file.py:factory)")
    _readable_file(spec, path)
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
        raise ModelLoadError(f"{spec}: importing {str(path)!r} raised {type(error).__name__}: {error}"
                             f"{_at(error)}") from error
    factory = getattr(module, factory_name, None)
    if factory is None or not callable(factory):
        candidates = sorted(n for n, v in vars(module).items()
                            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        hint = f"; callables defined there: {', '.join(candidates)}" if candidates else ""
        raise ModelLoadError(f"{spec}: {str(path)!r} defines no callable {factory_name!r}{hint}")
    return _from_factory(spec, factory, spec)


# Set (to 1) by ``shimkit audit --trust-pickle``, so that the workers it starts inherit it.
TRUST_PICKLE_ENV = "SHIMKIT_TRUST_PICKLE"


class UntrustedPickle(ModelLoadError):
    """A ``.pt2`` entry that only unpickling could read, refused: unpickling runs whatever code it names."""


@contextlib.contextmanager
def _without_unpickling(spec: str) -> Iterator[None]:
    """``torch.export.load`` with every way it unpickles refused: ``torch.load`` only with
    ``weights_only=True`` (tensors and plain containers, no code), ``pickle.loads`` and TorchScript's object
    unpickler not at all. Where an archive needs them (a tensor subclass weight, an opaque or script object
    constant, example inputs only a full unpickle reads), the load stops with :class:`UntrustedPickle`."""
    import pickle

    from shimkit._patching import ScopedPatches

    def refuse(what: str) -> UntrustedPickle:
        return UntrustedPickle(
            f"{spec}: the archive holds {what}, which only unpickling can read, and unpickling runs any "
            f"code the file names; shimkit audit reads a .pt2 as data. If you trust this file as you would "
            f"a .py model, pass --trust-pickle ({TRUST_PICKLE_ENV}=1)")

    original_load = torch.load

    def load(f: Any, *args: Any, weights_only: bool | None = None, **kwargs: Any) -> Any:
        if weights_only is False:
            raise refuse("an entry saved with torch.save that is not plain tensors")
        return original_load(f, *args, weights_only=True, **kwargs)

    def loads(*args: Any, **kwargs: Any) -> Any:
        raise refuse("a pickled Python object")

    def load_script_object(*args: Any, **kwargs: Any) -> Any:
        raise refuse("a pickled TorchScript object")

    patches = ScopedPatches()
    try:
        patches.replace(torch, "load", load)
        patches.replace(pickle, "loads", loads)
        patches.replace(torch._C, "_pickle_load_obj", load_script_object)
        yield
    finally:
        patches.undo()


def _load_exported(spec: str) -> LoadedModel:
    import os

    from shimkit.audit.names import check_archive, checked_loading, make_pasteable, unsafe_cause

    path = Path(spec)
    _readable_file(spec, path)
    trusted = os.environ.get(TRUST_PICKLE_ENV) == "1"
    try:
        # Names and expressions become code as torch reads the file, pickles or not: checked with --trust-pickle too.
        check_archive(path, spec)
        with contextlib.nullcontext() if trusted else _without_unpickling(spec), checked_loading(spec):
            exported = torch.export.load(str(path))
        renaming = make_pasteable(exported, spec)
    except UntrustedPickle:
        raise
    except Exception as error:
        cause = error.__cause__ or error.__context__
        if isinstance(cause, UntrustedPickle):  # torch wrapped the refusal
            raise cause from None
        refusal = unsafe_cause(error)  # torch may have wrapped it too
        if refusal is not None:
            raise ModelLoadError(str(refusal)) from None
        raise ModelLoadError(f"{spec}: not a loadable ExportedProgram ({type(error).__name__}: {error})") from error
    return LoadedModel(path.name, exported=exported, renaming=renaming)


def load_methods(spec: str) -> list[LoadedModel]:
    """Every method MODEL ``spec`` names: the methods of a program of several (each named ``spec#method``), the one
    ``spec#method`` names, or the one model of a one-method program."""
    program, method = split_method(spec)
    loaded = _load(program)
    if method is None:
        return loaded if isinstance(loaded, list) else [loaded]
    if not isinstance(loaded, list):
        raise ModelLoadError(f"{spec}: {program} is a program of one method; name it without '#{method}'")
    chosen = [m for m in loaded if m.method == method]
    if not chosen:
        raise ModelLoadError(f"{spec}: {program} has no method {method!r}; its methods: "
                             f"{', '.join(m.method or '' for m in loaded)}")
    return chosen


def load_model(spec: str) -> LoadedModel:
    """Load one MODEL argument (zoo name, ``file.py:factory``, ``.pt2`` or a suite model such as
    ``transformers/bert``), or one method of a program of several (``file.py:factory#decoder``)."""
    methods = load_methods(spec)
    if len(methods) > 1:
        raise ModelLoadError(f"{spec} is a program of {len(methods)} methods "
                             f"({', '.join(m.method or '' for m in methods)}): name one as {spec}#"
                             f"{methods[0].method}, or audit them all with load_methods")
    return methods[0]


def _load(spec: str) -> LoadedModel | list[LoadedModel]:
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
