"""The split of a translation: libclang parses it once, and each cooperative kernel it defines gets its
group function written beside it, or the reason it keeps running on fibers. The result is kept in the
artifact store, keyed by the text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from shimkit.metal.loops.cache import FORMAT, headers_digest, precompiled_stdlib, system_include
from shimkit.metal.loops.parameters import start_group
from shimkit.metal.loops.reach import Reach
from shimkit.metal.loops.source import Source, body_of, definitions, msl_line
from shimkit.metal.loops.state import Unsplittable
from shimkit.metal.loops.writer import SPLIT_SUFFIX, write_group_function
from shimkit.store import Store


@dataclass
class Split:
    """The group functions written for a translation, and why the others were not split."""

    text: str                                   # the translation's text with the group functions in it
    split: set[str] = field(default_factory=set)  # qualified names of the kernel functions split
    reasons: dict[str, str] = field(default_factory=dict)  # qualified name -> why it runs on fibers


def group_function(function: str) -> str:
    """The C++ naming a kernel's group function, from the expression naming the kernel (``f<float>``)."""
    head, angle, tail = function.partition("<")
    return f"{head}{SPLIT_SUFFIX}{angle}{tail}"


def split_kernels(text: str, kernels: dict, include_dir: Path, store: Store | None,
                  compiler: tuple[str, ...] = ("c++",)) -> Split:
    """Writes a group function for each cooperative kernel of the translated ``text`` that can be split.

    ``kernels`` maps each kernel's qualified function name (``ns::f``, no template arguments) to its
    parameters (``frontend.Parameter``); Clang parses the text with ``compiler``'s own headers (its
    ``-print-file-name=include``) on the path. The result is an entry of ``store`` keyed by the text."""
    if not kernels:
        return Split(text)
    if store is None:
        return split_translation(text, kernels, include_dir, compiler, None)
    key = store.key("metal-split", [FORMAT, headers_digest(include_dir), text, repr(sorted(
        (name, [(p.text, p.kind, p.binding) for p in params]) for name, params in kernels.items()))])

    def produce(staging: Path) -> None:
        result = split_translation(text, kernels, include_dir, compiler, store)
        (staging / "split.json").write_text(json.dumps({"text": result.text, "split": sorted(result.split),
                                                        "reasons": result.reasons}))

    saved = json.loads((store.build("metal-split", key, produce) / "split.json").read_text())
    return Split(saved["text"], set(saved["split"]), saved["reasons"])


def split_translation(text: str, kernels: dict, include_dir: Path, compiler: tuple[str, ...],
                      store: Store | None = None) -> Split:
    """What :func:`split_kernels` keeps in the store, written afresh (``store``: where the precompiled
    ``metal_stdlib`` is kept; None parses the header with every kernel)."""
    try:
        from clang import cindex
    except ImportError:
        return Split(text, reasons={name: "libclang is not installed (pip install libclang)" for name in kernels})
    prefix = '#include "metal_stdlib"\n'
    source = Source((prefix + text).encode())
    args = ["-std=c++20", f"-I{include_dir}"]
    compiler_include = system_include(compiler)
    if compiler_include:
        args += ["-isystem", compiler_include]
    header = precompiled_stdlib(include_dir, tuple(args), store) if store is not None else None
    unit = None
    if header is not None:
        # A precompiled header this libclang refuses (a fatal diagnostic, or no unit at all): the header
        # itself is parsed.
        try:
            unit = cindex.Index.create().parse("kernel.cpp", args=["-x", "c++", *args, "-include-pch", str(header)],
                                               unsaved_files=[("kernel.cpp", source.parsed)])
        except cindex.TranslationUnitLoadError:
            unit = None
        if unit is not None and any(d.severity >= cindex.Diagnostic.Fatal for d in unit.diagnostics):
            unit = None
    if unit is None:
        unit = cindex.Index.create().parse("kernel.cpp", args=["-x", "c++", *args],
                                           unsaved_files=[("kernel.cpp", source.parsed)])
    errors = [d for d in unit.diagnostics if d.severity >= cindex.Diagnostic.Error and d.location.file is not None
              and d.location.file.name == "kernel.cpp"]
    defined = definitions(unit.cursor)
    result = Split(text)
    reach = Reach(defined)
    insertions: list[tuple[int, str]] = []
    for name, parameters in kernels.items():
        cursor = next((c for c in defined.get(name, []) if body_of(c) is not None), None)
        if cursor is None:
            result.reasons[name] = "libclang does not see its definition"
            continue
        inside = [d for d in errors if cursor.extent.start.offset <= d.location.offset <= cursor.extent.end.offset]
        if inside:
            result.reasons[name] = (f"Clang reads it differently from the host compiler: {inside[0].spelling} "
                                    f"(line {msl_line(source.original, source.offset(inside[0].location.offset))})")
            continue
        try:
            state = start_group(source, cursor, parameters, reach)
            insertions.append((source.end(cursor), write_group_function(state)))
            result.split.add(name)
        except Unsplittable as why:
            result.reasons[name] = str(why)
        except Exception as error:  # libclang's Python binding on a construct it does not model
            result.reasons[name] = f"shimkit.metal could not split it ({type(error).__name__}: {error})"
    out = source.original
    for offset, code in sorted(insertions, reverse=True):
        out = out[:offset] + b" " + code.encode() + out[offset:]
    result.text = out[len(prefix):].decode()
    return result
