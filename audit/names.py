"""Model-provided names and expressions that would become code: renamed where they can be, refused where not,
before any code is generated.

torch.fx pastes names into the Python it generates and ``exec``\\ s: a parameter, buffer or constant FQN into
``getattr(self, "<name>")`` (``ExportedProgram.module()``), a graph input into ``def forward(self, <name>)``,
a keyword argument into ``{'<name>': ...}``; AOTInductor pastes constant FQNs into the C++ wrapper
(``constants_info_[i].original_fqn = "<name>";``). None of them is escaped, so a ``.pt2`` naming a parameter
``w", __import__("os").system(...)) #`` runs that code when its program is run or compiled. The same file can
also carry code that torch evaluates as it stands: ``torch.export.load`` reads each symbolic size with
``sympy.sympify`` (``eval``), loads the compiled AOTInductor package a ``.pt2`` may hold, and
``ExportedProgram.module()`` ``exec``\\ s the program's shape guards.

Ordinary models carry such names too: ``nn.Module.add_module`` takes any name without a dot, and torchvision's
RegNet names its blocks ``block1-0``. So a name that is not a dotted FQN of ASCII identifier characters
(:data:`FQN`) is **renamed** before anything generates code from the program (:func:`make_pasteable`): each
segment outside :data:`SEGMENT` gets a stand-in of its ASCII letters and a digest of the whole segment
(``block1-0`` becomes ``block1_0_u<8 hex digits>``), the same everywhere it occurs (state dict, constants,
signature, module call graph, graph nodes and their module stacks), unique in the program and the same in every
run. The report lists every renaming and shows findings under the user's names (:meth:`Renaming.restore`).

What a stand-in cannot replace is refused (:class:`UnsafeProgram`: the loader reports it as the model's load
error, the runner as its export error; either way its audit "could not run"): a symbolic size that is not a
sympy expression of constructors, a guard that is not a condition on its inputs' sizes, an operator name, a
keyword argument's name (a caller passes the keyword by it), and in a ``.pt2``, a graph value's name that torch
pastes into Python as it reads the file, before there is a program to rename. :func:`check_archive` before
``torch.export.load``, :func:`checked_loading` around it (the checks at the two places it generates or evaluates
code), :func:`make_pasteable` on the loaded or exported program before anything else touches it.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import re
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

# One segment: the characters of a C and an ASCII Python identifier (a leading digit too: ``Sequential``'s
# ``layers.0.weight``). Nothing that can end a string literal, a comment or a line, in Python or in C++.
SEGMENT = re.compile(r"[A-Za-z0-9_]+", re.ASCII)
FQN = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*", re.ASCII)
_GRAMMAR = "a dotted name of ASCII letters, digits and underscores"

# Where a .pt2 keeps compiled AOTInductor packages, which torch.export.load loads (dlopen) as it reads the file.
_AOTINDUCTOR_DIR = "data/aotinductor/"


class UnsafeProgram(ValueError):
    """A program carrying something that would run as code: refused before any code is generated or run."""


class UnsafeName(UnsafeProgram):
    """A name outside :data:`FQN` (or a single :data:`SEGMENT`) that would be pasted into generated code."""


class UnsafeGuard(UnsafeProgram):
    """A shape guard that is not a condition on the inputs' sizes: ``.module()`` would ``exec`` it."""


class UnsafeExpression(UnsafeProgram):
    """A symbolic size that is not a sympy expression of constructors: ``sympy.sympify`` would ``eval`` it."""


def is_safe_name(name: Any, *, dotted: bool = True) -> bool:
    """Whether ``name`` is a string of :data:`FQN` (``dotted=False``: of one :data:`SEGMENT`)."""
    return isinstance(name, str) and (FQN if dotted else SEGMENT).fullmatch(name) is not None


def check_name(name: Any, kind: str, where: str, *, dotted: bool = True) -> None:
    """Raise :class:`UnsafeName` naming ``name`` (escaped) and its ``kind`` unless :func:`is_safe_name`."""
    if not is_safe_name(name, dotted=dotted):
        shown = ascii(name) if isinstance(name, str) else f"{ascii(name)} (a {type(name).__name__}, not a string)"
        grammar = _GRAMMAR if dotted else "a name of ASCII letters, digits and underscores"
        raise UnsafeName(f"{where}: the program's {kind} {shown} is not {grammar}; generated Python and C++ "
                         f"would carry it as code, so the program is refused")


def check_archive(path: Path, where: str) -> None:
    """Refuse a ``.pt2`` holding a compiled AOTInductor package: ``torch.export.load`` loads its shared library
    (its constructors run) or compiles its sources. A file that is not a zip archive is left to torch."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return
    for entry in entries:
        if _AOTINDUCTOR_DIR in entry.replace("\\", "/"):
            raise UnsafeProgram(f"{where}: the archive holds a compiled AOTInductor package ({ascii(entry)}), "
                                f"native code that torch.export.load would load and run; shimkit audit reads a "
                                f".pt2 as data and refuses it")


def check_graph(graph: Any, where: str) -> None:
    """The names one FX graph pastes into the code generated from it (:mod:`torch.fx`'s ``python_code``)."""
    import torch

    for node in graph.nodes:
        check_name(node.name, "node name", where, dotted=False)
        if node.op == "placeholder":  # pasted into ``def forward(self, <target>)``; ``*args`` is FX's own
            check_name(node.target.lstrip("*") if isinstance(node.target, str) else node.target,
                       "graph input", where, dotted=False)
        elif node.op in ("get_attr", "call_module"):
            check_name(node.target, "attribute" if node.op == "get_attr" else "submodule", where)
        elif node.op == "call_method":
            check_name(node.target, "method", where, dotted=False)
        elif node.op == "call_function":
            if isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                qualified = (node.target.name() if isinstance(node.target, torch._ops.OpOverload)
                             else node.target._qualified_op_name)
                namespace, _, name = qualified.partition("::")
                check_name(namespace, "operator namespace", where, dotted=False)
                check_name(name, "operator", where)
            elif isinstance(node.target, str):
                check_name(node.target, "function", where)
    codegen = getattr(graph, "_codegen", None)
    pytree_info = getattr(codegen, "pytree_info", None)
    if pytree_info is not None:  # ``.module()``'s signature: forward's argument names and keyword names
        for name in pytree_info.orig_args:
            check_name(name, "forward argument", where, dotted=False)
        for name in _keyword_names(pytree_info.in_spec):
            check_name(name, "keyword argument", where, dotted=False)


def _keyword_names(in_spec: Any) -> list[Any]:
    """The keys of an ``(args, kwargs)`` input spec's ``kwargs``: FX pastes them into ``{'<key>': ...}``."""
    if in_spec is None or in_spec.type is not tuple or in_spec.num_children != 2:
        return []
    kwargs = in_spec.child(1)
    return list(kwargs.context or []) if kwargs.type is dict else []


# A stand-in's digest: eight hex digits (32 bits) unless two segments of one program would share a stand-in.
_DIGEST_LENGTHS = (8, 16, 32, 64)
_SPEC_KINDS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant",
               "CUSTOM_OBJ": "custom object", "TOKEN": "token", "USER_INPUT": "input", "BUFFER_MUTATION": "buffer",
               "PARAMETER_MUTATION": "parameter", "USER_INPUT_MUTATION": "input", "GRADIENT_TO_PARAMETER": "parameter",
               "GRADIENT_TO_USER_INPUT": "input", "LOSS_OUTPUT": "output", "USER_OUTPUT": "output"}


@dataclass(frozen=True)
class Renamed:
    """One name of the program that generated code cannot carry, and the stand-in it carries instead."""

    kind: str  # parameter, buffer, constant, module path, graph value, forward argument, ...
    name: str
    stand_in: str


@dataclass
class Renaming:
    """What :func:`make_pasteable` renamed: every name (:attr:`renamed`, in the order the program holds them)
    and every segment's stand-in (:attr:`segments`), by which :meth:`restore` gives messages back their names."""

    renamed: list[Renamed] = field(default_factory=list)
    segments: dict[str, str] = field(default_factory=dict)  # the user's segment -> its stand-in

    def by_segment(self) -> list[tuple[str, str, list[Renamed]]]:
        """``(segment, stand_in, names)`` for every renamed segment, with the names that hold it."""
        return [(segment, stand_in, [r for r in self.renamed if r.name == segment or segment in r.name.split(".")])
                for segment, stand_in in self.segments.items()]

    def restore(self, value: Any) -> Any:
        """``value`` with every stand-in in its strings (a message, a node's target, a JSON report entry's
        nested lists and dicts) replaced by the user's own segment: ``p_block1_0_u3d5e0c1a_weight`` reads
        ``p_block1-0_weight``."""
        if not self.segments:
            return value
        by_stand_in = {stand_in: segment for segment, stand_in in self.segments.items()}
        # Longest first: a stand-in never hides inside a longer one's match.
        pattern = re.compile("|".join(map(re.escape, sorted(by_stand_in, key=len, reverse=True))))

        def restored(item: Any) -> Any:
            if isinstance(item, str):
                return pattern.sub(lambda found: by_stand_in[found.group(0)], item)
            if isinstance(item, dict):
                return {restored(key): restored(entry) for key, entry in item.items()}
            if isinstance(item, (list, tuple)):
                return type(item)(restored(entry) for entry in item)
            return item

        return restored(value)


def stand_in(segment: str, digits: int = _DIGEST_LENGTHS[0]) -> str:
    """A :data:`SEGMENT` for ``segment``: its letters and digits as ASCII (accents dropped, every other run of
    characters one ``_``) and ``u`` with the first ``digits`` hex digits of its SHA-256, so that two segments
    that read alike stay apart: ``stand_in("block1-0") == "block1_0_u" + sha256(b"block1-0")[:8]``."""
    letters = unicodedata.normalize("NFKD", segment).encode("ascii", "ignore").decode("ascii")
    base = re.sub(r"[^A-Za-z0-9_]+", "_", letters).strip("_")
    digest = hashlib.sha256(segment.encode("utf-8", "surrogatepass")).hexdigest()[:digits]
    return f"{base}_u{digest}" if base else f"u{digest}"


def _graph_modules(exported: Any) -> Iterator[Any]:
    for module in exported.graph_module.modules():
        if getattr(module, "graph", None) is not None:
            yield module


def _positional_arguments(signature: Any) -> list[Any]:
    """The names of ``signature.forward_arg_names`` that are not keywords (a caller passes a keyword by name)."""
    keywords = set(_keyword_names(signature.in_spec))
    return [name for name in signature.forward_arg_names or () if name not in keywords]


def _names_to_paste(exported: Any) -> Iterator[tuple[str, Any, bool]]:
    """``(kind, name, dotted)`` for every name :func:`make_pasteable` may rename, in the program's order."""
    signature = exported.graph_signature
    for spec in (*signature.input_specs, *signature.output_specs):
        if spec.target is not None:
            yield _SPEC_KINDS.get(spec.kind.name, spec.kind.name.lower()), spec.target, True
    yield from (("parameter or buffer", name, True) for name in exported.state_dict)
    yield from (("constant", name, True) for name in exported.constants)
    for entry in exported.module_call_graph:
        if entry.fqn:
            yield "module path", entry.fqn, True
        if entry.signature is not None:
            yield from (("forward argument", name, False) for name in _positional_arguments(entry.signature))
    for module in _graph_modules(exported):
        yield from (("graph value", node.name, False) for node in module.graph.nodes)


def _segments_of(name: str, dotted: bool) -> list[str]:
    return name.split(".") if dotted else [name]


def _stand_ins(names: list[tuple[str, Any, bool]]) -> dict[str, str]:
    """Each unsafe segment of ``names`` (:func:`_names_to_paste`) with its stand-in, unique among the program's
    segments and the other stand-ins."""
    safe: set[str] = set()
    unsafe: set[str] = set()
    for _, name, dotted in names:
        if isinstance(name, str):
            for segment in _segments_of(name, dotted):
                (safe if SEGMENT.fullmatch(segment) else unsafe).add(segment)
    stand_ins: dict[str, str] = {}
    for segment in sorted(unsafe):
        candidate = next((c for c in (stand_in(segment, digits) for digits in _DIGEST_LENGTHS) if c not in safe),
                         None)
        if candidate is None:  # a program holding four SHA-256 prefixes of its own segment: refused below
            continue
        safe.add(candidate)
        stand_ins[segment] = candidate
    return stand_ins


def make_pasteable(exported: Any, where: str) -> Renaming:
    """Rename, in ``exported`` (an ``ExportedProgram``, changed in place), every parameter, buffer, constant,
    module path, graph value and positional forward argument that is not :data:`FQN` (or a single
    :data:`SEGMENT`), then refuse what is left unsafe (:func:`check_program`). Call it before anything
    generates code from the program.

    A module built with ``seq.add_module("block1-0", torch.nn.Linear(4, 4))`` exports the parameter
    ``seq.block1-0.weight``; afterwards the program, its state dict and signature hold
    ``seq.block1_0_u<digest>.weight`` and the result's ``renamed`` says so."""
    names = list(_names_to_paste(exported))
    segments = _stand_ins(names)
    renaming = Renaming(segments=segments)
    if segments:
        seen: set[str] = set()
        for kind, name, dotted in names:
            renamed = _renamed(name, dotted, segments)
            if renamed != name and name not in seen:
                seen.add(name)
                renaming.renamed.append(Renamed(kind, name, renamed))
        _rename_program(exported, segments)
    check_program(exported, where)
    return renaming


def _renamed(name: Any, dotted: bool, segments: dict[str, str]) -> Any:
    if not isinstance(name, str):
        return name
    return ".".join(segments.get(segment, segment) for segment in _segments_of(name, dotted))


def _rename_program(exported: Any, segments: dict[str, str]) -> None:
    def fqn(name: Any) -> Any:
        return _renamed(name, True, segments)

    def value(name: Any) -> Any:
        return _renamed(name, False, segments)

    for table in (exported.state_dict, exported.constants):  # in place: the program's own dicts, in order
        entries = list(table.items())
        table.clear()
        table.update((fqn(name), tensor) for name, tensor in entries)
    signature = exported.graph_signature
    for spec in (*signature.input_specs, *signature.output_specs):
        spec.target = fqn(spec.target)
        _rename_argument(spec.arg, value)
    for entry in exported.module_call_graph:
        entry.fqn = fqn(entry.fqn)
        if entry.signature is not None:
            for argument in (*entry.signature.inputs, *entry.signature.outputs):
                _rename_argument(argument, value)
            positional = set(_positional_arguments(entry.signature))
            entry.signature.forward_arg_names = [value(name) if name in positional else name
                                                 for name in entry.signature.forward_arg_names or ()]
    for module in _graph_modules(exported):
        for node in module.graph.nodes:
            stand_in_name = segments.get(node.name)
            if stand_in_name is not None:
                was = node.name
                node._rename(stand_in_name)
                if node.name != stand_in_name:
                    raise UnsafeName(f"the graph value {ascii(was)} could not be renamed {stand_in_name!r}")
                if node.op == "placeholder" and node.target == was:
                    node.target = stand_in_name
            stack = node.meta.get("nn_module_stack")
            if stack:  # module paths, as torch.export.unflatten matches them to the module call graph's
                node.meta["nn_module_stack"] = {fqn(key): (fqn(path), *rest) for key, (path, *rest) in stack.items()}
        module.recompile()
    guards = getattr(exported, "_guards_code", None)
    if guards:
        exported._guards_code = [_guard_renamed(guard, segments) for guard in guards]


def _rename_argument(argument: Any, rename: Any) -> None:
    if isinstance(getattr(argument, "name", None), str):
        argument.name = rename(argument.name)


def _guard_renamed(guard: Any, segments: dict[str, str]) -> Any:
    """``guard`` reading each renamed forward argument by its stand-in (``L['é']`` -> ``L['u<digest>']``); a
    guard that does not parse is left for :func:`check_guard` to refuse."""
    if not isinstance(guard, str):
        return guard
    try:
        tree = ast.parse(guard, mode="eval")
    except SyntaxError:
        return guard
    changed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "L":
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in segments:
                key.value = segments[key.value]
                changed = True
    return ast.unparse(tree) if changed else guard


def check_program(exported: Any, where: str) -> None:
    """Every name ``exported`` (an ``ExportedProgram``) carries that can reach generated Python or C++, and its
    shape guards, which ``.module()`` ``exec``\\ s. Call it before anything generates code from the program."""
    for name in exported.state_dict:
        check_name(name, "parameter or buffer name", where)
    for name in exported.constants:
        check_name(name, "constant name", where)
    signature = exported.graph_signature
    for spec in signature.input_specs:
        if spec.target is not None:
            check_name(spec.target, f"{spec.kind.name.lower().replace('_', ' ')} name", where)
        _check_argument(spec.arg, where)
    for spec in signature.output_specs:
        if spec.target is not None:
            check_name(spec.target, f"{spec.kind.name.lower().replace('_', ' ')} target", where)
        _check_argument(spec.arg, where)
    for name, module in exported.graph_module.named_modules():
        if name:
            check_name(name, "submodule", where)
        graph = getattr(module, "graph", None)
        if graph is not None:
            check_graph(graph, where)
    for entry in exported.module_call_graph:
        if entry.fqn:  # the root module's is empty
            check_name(entry.fqn, "module path", where)
        if entry.signature is not None:
            for argument in (*entry.signature.inputs, *entry.signature.outputs):
                _check_argument(argument, where)
            for name in entry.signature.forward_arg_names or ():
                check_name(name, "forward argument", where, dotted=False)
            for name in _keyword_names(entry.signature.in_spec):
                check_name(name, "keyword argument", where, dotted=False)
    for guard in getattr(exported, "_guards_code", None) or ():
        check_guard(guard, where)


def _check_argument(argument: Any, where: str) -> None:
    name = getattr(argument, "name", None)
    if name is not None:
        check_name(name, "graph value", where, dotted=False)


# What a shape guard may call: methods of an input reading its sizes, and arithmetic on them.
_SIZE_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})
_GUARD_FUNCTIONS = frozenset({"max", "min", "abs", "int", "float", "round", "bool", "len",
                              "IsNonOverlappingAndDenseIndicator", "cast_symbool_to_symint_guardless"})
_GUARD_TEXT = re.compile(r"[ -~]*", re.ASCII)
_GUARD_OPERATORS = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
                    ast.Invert, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                    ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor, ast.Compare, ast.Eq, ast.NotEq,
                    ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp, ast.Load)


def check_guard(guard: Any, where: str) -> None:
    """Refuse a guard (``ExportedProgram._guards_code``, which ``.module()`` pastes into a function it ``exec``\\ s)
    unless it is arithmetic and comparisons on ``L[...]``'s sizes, strides and offsets: ``L['x'].size()[0] >= 2``."""
    try:  # one line of printable ASCII without a comment: pasted into a line of code, it stays one expression
        tree = (ast.parse(guard, mode="eval")
                if isinstance(guard, str) and _GUARD_TEXT.fullmatch(guard) and "#" not in guard else None)
    except SyntaxError:
        tree = None
    if tree is None or not _safe_guard(tree):
        raise UnsafeGuard(f"{where}: the program's shape guard {ascii(guard)} is not a condition on its inputs' "
                          f"sizes; .module() would run it as code, so the program is refused")


def _safe_guard(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool) or node.value is None
    if isinstance(node, ast.Name):
        return node.id in ("L", "inf")
    if isinstance(node, ast.Subscript):  # L['x'], L['x'].size()[0]
        key = node.slice
        return (isinstance(key, ast.Constant) and (type(key.value) is int or is_safe_name(key.value, dotted=False))
                and _safe_guard(node.value))
    if isinstance(node, ast.Attribute):  # an input's attribute (a dataclass field): L['x'].field
        return is_safe_name(node.attr, dotted=False) and not node.attr.startswith("_") and _input_path(node.value)
    if isinstance(node, ast.Call):
        function = node.func
        if node.keywords:
            return False
        if isinstance(function, ast.Name):
            allowed = function.id in _GUARD_FUNCTIONS
        elif isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
            module = function.value.id
            allowed = ((module == "math" and not function.attr.startswith("_"))
                       or (module == "torch" and function.attr.startswith("sym_"))
                       or (function.attr in _SIZE_METHODS and _input_path(function.value)))
        elif isinstance(function, ast.Attribute):
            allowed = function.attr in _SIZE_METHODS and _input_path(function.value)
        else:
            allowed = False
        return allowed and all(_safe_guard(argument) for argument in node.args)
    return isinstance(node, _GUARD_OPERATORS) and all(_safe_guard(child) for child in ast.iter_child_nodes(node))


def _input_path(node: ast.AST) -> bool:
    """``L``, ``L['x']``, ``L['x'][0]``, ``L['x'].field``: an input of the program (sizes are read from it)."""
    if isinstance(node, ast.Name):
        return node.id == "L"
    return isinstance(node, (ast.Subscript, ast.Attribute)) and _safe_guard(node)


def check_sympy_expression(text: str, names: dict[str, Any] | None, where: str) -> None:
    """Refuse ``text`` unless ``sympify`` (which ``eval``\\ s it, resolving names in ``names``, then sympy's own)
    would only construct sympy expressions: calls of sympy expression classes on numbers, symbol names and
    such calls, as ``srepr`` writes them (``Mul(Integer(2), Symbol('s0', positive=True, integer=True))``)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        tree = None
    if tree is None or not _safe_expression(tree.body, names or {}):
        raise UnsafeExpression(f"{where}: the program's symbolic size {ascii(text)} is not a sympy expression; "
                               f"reading it would run it as code, so the program is refused")


# A string sympy may itself sympify (a non-strict argument): a number or a symbol name, never a call.
_EXPRESSION_STRING = re.compile(r"[A-Za-z0-9_.+\-]*", re.ASCII)


def _safe_expression(node: ast.AST, names: dict[str, Any]) -> bool:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return _EXPRESSION_STRING.fullmatch(node.value) is not None and "__" not in node.value
        return type(node.value) in (int, float, bool) or node.value is None
    if isinstance(node, ast.Name):
        return is_safe_name(node.id, dotted=False) and not node.id.startswith("_")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _safe_expression(node.operand, names)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
        return _safe_expression(node.left, names) and _safe_expression(node.right, names)
    if isinstance(node, ast.Tuple):  # Piecewise's (expression, condition) pairs
        return all(_safe_expression(element, names) for element in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return (_sympy_class(node.func.id, names)
                and all(_safe_expression(argument, names) for argument in node.args)
                and all(keyword.arg is not None and is_safe_name(keyword.arg, dotted=False)
                        and _safe_expression(keyword.value, names) for keyword in node.keywords))
    return False


def _sympy_class(name: str, names: dict[str, Any]) -> bool:
    """Whether ``name``, resolved as ``sympify`` resolves it, is a sympy expression class (constructing one runs
    no code of the file's); functions such as ``sympify``, ``S`` or ``lambdify`` are not."""
    import sympy

    if name.startswith("_"):
        return False
    value = names[name] if name in names else getattr(sympy, name, None) if name in sympy.__all__ else None
    return isinstance(value, type) and issubclass(value, sympy.Basic)


@contextlib.contextmanager
def checked_loading(where: str) -> Iterator[None]:
    """``torch.export.load`` with its two ways of turning the file's text into code checked first: every FX graph
    it generates Python for (:func:`check_graph`), every string it hands ``sympy.sympify``
    (:func:`check_sympy_expression`)."""
    import sympy
    import torch

    from shimkit._patching import ScopedPatches

    original_python_code = torch.fx.Graph.python_code
    original_sympify = sympy.sympify

    def python_code(self: Any, *args: Any, **kwargs: Any) -> Any:
        check_graph(self, where)
        return original_python_code(self, *args, **kwargs)

    def sympify(value: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(value, str):
            check_sympy_expression(value, kwargs["locals"] if "locals" in kwargs else args[0] if args else None,
                                   where)
        return original_sympify(value, *args, **kwargs)

    patches = ScopedPatches()
    try:
        patches.replace(torch.fx.Graph, "python_code", python_code)
        patches.replace(sympy, "sympify", sympify)
        yield
    finally:
        patches.undo()


def unsafe_cause(error: BaseException) -> UnsafeProgram | None:
    """The :class:`UnsafeProgram` behind ``error``, which torch may have wrapped (``SerializeError``)."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        if isinstance(current, UnsafeProgram):
            return current
        seen.append(current)
        current = current.__cause__ or current.__context__
    return None

