"""Reading the translated source and libclang's AST of it: offsets back to the source, the function
definitions the source holds, and the names calls and declarations have."""

from __future__ import annotations

import bisect
import re

import shimkit.metal.cursors as cursors

FLOAT_LITERAL = re.compile(rb"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?![\w.])")
LINE_MARKER = re.compile(rb"^#\s*(\d+)\s+\"[^\"]*\"[^\n]*\n", re.M)


class Source:
    """The translated source, and the same with an ``f`` after every unsuffixed floating literal for
    Clang: the host compiler builds with ``-fsingle-precision-constant`` (Metal has no double), which
    Clang has not, so ``auto x = 2.0`` would be a double to Clang and a float to the library. Offsets in
    Clang's AST map back to the source."""

    def __init__(self, original: bytes) -> None:
        self.original = original
        self.inserted: list[int] = []
        pieces: list[bytes] = []
        at = 0
        for match in FLOAT_LITERAL.finditer(original):
            pieces += [original[at:match.end()], b"f"]
            at = match.end()
            self.inserted.append(match.end() + len(self.inserted))
        pieces.append(original[at:])
        self.parsed = b"".join(pieces)

    def offset(self, parsed: int) -> int:
        return parsed - bisect.bisect_left(self.inserted, parsed)

    def start(self, cursor) -> int:
        return self.offset(cursor.extent.start.offset)

    def end(self, cursor) -> int:
        return self.offset(cursor.extent.end.offset)


def qualified_name(cursor) -> str:
    parts = []
    while cursor is not None and cursor.kind.name != "TRANSLATION_UNIT":
        if cursor.spelling:
            parts.append(cursor.spelling)
        cursor = cursor.semantic_parent
    return "::".join(reversed(parts))


def definitions(root) -> dict[str, list]:
    """Function definitions written in the source (not shimkit's headers), by qualified name."""
    found: dict[str, list] = {}

    def visit(cursor) -> None:
        for child in cursor.get_children():
            location = child.location.file
            if location is None or location.name != "kernel.cpp":
                continue
            kind = child.kind.name
            if kind in ("FUNCTION_DECL", "FUNCTION_TEMPLATE", "CXX_METHOD") and child.is_definition():
                found.setdefault(qualified_name(child), []).append(child)
            elif kind in ("NAMESPACE", "LINKAGE_SPEC", "STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE"):
                visit(child)

    visit(root)
    return found


def body_of(cursor):
    return next((c for c in cursor.get_children() if cursors.kind(c) == "COMPOUND_STMT"), None)


def parameters_of(function) -> list:
    """A function's parameters (``get_arguments`` is empty for a function template)."""
    return [c for c in function.get_children() if cursors.kind(c) == "PARM_DECL"]


def callee_name(call) -> str:
    """The name a call calls: Clang's, or for a call it could not resolve (a dependent call in a
    template: ``f<T, N>(x)``, ``ns::f(x)``), the last name before the arguments."""
    if call.spelling:
        return call.spelling
    name, depth = "", 0
    for token in call.get_tokens():
        spelling = token.spelling
        if spelling == "<":
            depth += 1
        elif spelling == ">":
            depth -= 1
        elif spelling == "(" and depth == 0:
            break
        elif depth == 0 and re.match(r"^[A-Za-z_]\w*$", spelling) and spelling not in ("template", "typename"):
            name = spelling
    return name


def msl_line(source: bytes, offset: int) -> int:
    """The MSL line of an offset in the translated source, through the preprocessor's line markers."""
    before = source[:offset]
    marker = None
    for marker in LINE_MARKER.finditer(before):
        pass
    if marker is None:
        return before.count(b"\n")
    return int(marker.group(1)) + before.count(b"\n", marker.end())


def inside(inner, outer) -> bool:
    return (outer.extent.start.offset <= inner.extent.start.offset
            and inner.extent.end.offset <= outer.extent.end.offset)
