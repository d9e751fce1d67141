"""Work-group loops: kernels with barriers and simdgroup functions compiled into loops over their threads.

A kernel that reaches ``threadgroup_barrier`` or a simdgroup function cannot run its threads one after
another: each thread must stop at the barrier until all have arrived. POCL (``WorkitemLoops``), MCUDA
("deep fission") and COX (hierarchical collapsing) compile such a kernel into one loop over the group's
threads per region between two barriers, with every variable live across a barrier stored per thread. This
module does that at the source level, on Clang's AST of the translated kernel (libclang): the AST has the
statements, the variables with their types and every call resolved to its declaration, which is what the
split needs; the C++ it writes goes to the same host compiler as the rest of the library.

For each cooperative kernel it writes a *group function* beside the kernel: same buffer parameters, plus
the group's threads. In it,

* every variable declared in a block that contains a split point is an array over the group's threads
  (``auto& acc = storage[t]`` in each region), and so is a buffer parameter the kernel reassigns, but for
  a variable every thread holds alike (``uniform.py``): that is one value, assigned once per group;
* statements between split points form a region: ``group.region(mask, [&](t) { ... })``;
* ``if`` / ``for`` / ``while`` / ``do`` that contain a split point run as plain C++ at group level where
  their condition is uniform, and otherwise with a per-thread mask (a thread that leaves the loop or
  takes the other branch sits out); ``return`` takes the thread out of every later region;
* two regions with nothing between them run as one loop (an inlined function's last region and its
  caller's next statements; a condition's region and the first region of its branch);
* a statement with a simdgroup function (``acc = simd_sum(acc)``, ``if (simd_any(p))``) splits around its
  call: the call is evaluated for every thread, the lanes of each simdgroup combine, then the statement
  runs with the results (``shimkit_metal/loops.h``, the COX treatment of warp functions). A call of
  sync.h's own functions on plain operands is written directly: its operands go to per-thread arrays and
  ``metal::lanes`` combines them, with no lane records and no second evaluation of the call.

What it cannot split runs on cooperative fibers as before, and the kernel says why
(:attr:`shimkit.metal.MetalKernel.execution` is ``"fibers"``, ``fibers_because`` the reason): a call to a
function of the source that itself reaches a barrier (c10's ``threadgroup_sum``: only the kernel's own body
is split, no inlining), ``goto`` / ``switch`` / ``break`` / ``continue`` across a split loop, a split point
inside an expression with another one, ``auto`` variables of dependent type, references or directly
initialised variables live across a split, and a simdgroup call whose operands have side effects.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import shimkit.metal.cursors as cursors
from shimkit.metal.uniform import Uniformity, written
from shimkit.store import Store, digest_of, tree_digest

BARRIERS = {"threadgroup_barrier", "simdgroup_barrier"}
MAX_INLINE_DEPTH = 8
TWO_COMBINES = {"simd_ballot", "simd_any", "simd_all"}  # sync.h functions with two simd_collective calls
UNIFORM_VOTES = {"simd_any", "simd_all"}  # one value for every active lane of a simdgroup
ARITHMETIC = {"BOOL", "CHAR_S", "SCHAR", "UCHAR", "SHORT", "USHORT", "INT", "UINT", "LONG", "ULONG", "LONGLONG",
              "ULONGLONG", "FLOAT", "DOUBLE"}
# sync.h's simdgroup functions that metal::lanes also has over per-thread arrays (called directly).
DIRECT = {"simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor",
          "simd_prefix_inclusive_sum", "simd_prefix_exclusive_sum", "simd_prefix_inclusive_product",
          "simd_prefix_exclusive_product", "simd_broadcast", "simd_broadcast_first", "simd_shuffle",
          "simd_shuffle_down", "simd_shuffle_up", "simd_shuffle_xor", "simd_shuffle_rotate_down",
          "simd_shuffle_rotate_up", "simd_ballot", "simd_any", "simd_all"}
# Words in a type's spelling that C++ cannot write where the type is needed (Clang's names for deduced,
# dependent and unnamed types).
UNNAMEABLE = ("auto", "dependent", "(lambda", "(anonymous", "(unnamed")
COLLECTIVE = re.compile(r"^(simd_\w+|quad_\w+)$")
BARRIER = "/* barrier */"
MAX_THREADS = "::shimkit_metal::kMaxGroupThreads"
ASSIGNMENTS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
LOOPS = {"FOR_STMT", "WHILE_STMT", "DO_STMT"}
THREAD_INDEX = {"index_in_group": "shimkit_t", "lane": "shimkit_t % ::shimkit_metal::kSimdWidth",
                "simd_index": "shimkit_t / ::shimkit_metal::kSimdWidth",
                "simds_per_group": "shimkit_g.base().simds_per_group"}
SPLIT_SUFFIX = "__shimkit_group"
FORMAT = "1"
FLOAT_LITERAL = re.compile(rb"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?![\w.])")
LINE_MARKER = re.compile(rb"^#\s*(\d+)\s+\"[^\"]*\"[^\n]*\n", re.M)


class Unsplittable(Exception):
    """Why a kernel keeps running on fibers."""


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
        return _split(text, kernels, include_dir, compiler, None)
    key = store.key("metal-split", [FORMAT, _headers_digest(include_dir), text, repr(sorted(
        (name, [(p.text, p.kind, p.binding) for p in params]) for name, params in kernels.items()))])

    def produce(staging: Path) -> None:
        result = _split(text, kernels, include_dir, compiler, store)
        (staging / "split.json").write_text(json.dumps({"text": result.text, "split": sorted(result.split),
                                                        "reasons": result.reasons}))

    saved = json.loads((store.build("metal-split", key, produce) / "split.json").read_text())
    return Split(saved["text"], set(saved["split"]), saved["reasons"])


@functools.lru_cache(maxsize=None)
def _headers_digest(include_dir: Path) -> str:
    """The splitter's headers and its own modules (its analyses and readers), which decide what it writes."""
    return digest_of([tree_digest(include_dir / "shimkit_metal", ("*.h",)), tree_digest(Path(__file__).parent, ("*.py",))])


@functools.lru_cache(maxsize=None)
def _precompiled_stdlib(include_dir: Path, args: tuple[str, ...], store: Store) -> Path | None:
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

    key = store.key("libclang-pch", [FORMAT, _headers_digest(include_dir), _libclang_version(), *args])
    try:
        return store.build("libclang-pch", key, produce) / "metal_stdlib.pch"
    except Unsaved:
        return None


@functools.lru_cache(maxsize=1)
def _libclang_version() -> str:
    from clang import cindex

    version = cindex.conf.lib.clang_getClangVersion
    version.restype = cindex._CXString  # the bindings leave it an int: the address of the string
    return cindex._CXString.from_result(version())


@functools.lru_cache(maxsize=None)
def _system_include(compiler: tuple[str, ...]) -> str:
    done = subprocess.run([*compiler, "-print-file-name=include"], capture_output=True, text=True)
    return done.stdout.strip()


class _Source:
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


def _split(text: str, kernels: dict, include_dir: Path, compiler: tuple[str, ...],
           store: Store | None = None) -> Split:
    try:
        from clang import cindex
    except ImportError:
        return Split(text, reasons={name: "libclang is not installed (pip install libclang)" for name in kernels})
    prefix = '#include "metal_stdlib"\n'
    source = _Source((prefix + text).encode())
    args = ["-std=c++20", f"-I{include_dir}"]
    system_include = _system_include(compiler)
    if system_include:
        args += ["-isystem", system_include]
    header = _precompiled_stdlib(include_dir, tuple(args), store) if store is not None else None
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
    definitions = _definitions(unit.cursor)
    result = Split(text)
    reach = _Reach(definitions)
    insertions: list[tuple[int, str]] = []
    for name, parameters in kernels.items():
        cursor = next((c for c in definitions.get(name, []) if _body(c) is not None), None)
        if cursor is None:
            result.reasons[name] = "libclang does not see its definition"
            continue
        inside = [d for d in errors if cursor.extent.start.offset <= d.location.offset <= cursor.extent.end.offset]
        if inside:
            result.reasons[name] = (f"Clang reads it differently from the host compiler: {inside[0].spelling} "
                                    f"(line {_msl_line(source.original, source.offset(inside[0].location.offset))})")
            continue
        try:
            writer = _GroupWriter(source, cursor, parameters, reach)
            insertions.append((source.end(cursor), writer.write()))
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


def _qualified(cursor) -> str:
    parts = []
    while cursor is not None and cursor.kind.name != "TRANSLATION_UNIT":
        if cursor.spelling:
            parts.append(cursor.spelling)
        cursor = cursor.semantic_parent
    return "::".join(reversed(parts))


def _definitions(root) -> dict[str, list]:
    """Function definitions written in the source (not shimkit's headers), by qualified name."""
    found: dict[str, list] = {}

    def visit(cursor) -> None:
        for child in cursor.get_children():
            location = child.location.file
            if location is None or location.name != "kernel.cpp":
                continue
            kind = child.kind.name
            if kind in ("FUNCTION_DECL", "FUNCTION_TEMPLATE", "CXX_METHOD") and child.is_definition():
                found.setdefault(_qualified(child), []).append(child)
            elif kind in ("NAMESPACE", "LINKAGE_SPEC", "STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE"):
                visit(child)

    visit(root)
    return found


def _body(cursor):
    return next((c for c in cursor.get_children() if cursors.kind(c) == "COMPOUND_STMT"), None)




def _parameters(function) -> list:
    """A function's parameters (``get_arguments`` is empty for a function template)."""
    return [c for c in function.get_children() if cursors.kind(c) == "PARM_DECL"]




def _callee_name(call) -> str:
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


class _Reach:
    """Which calls are split points, and which functions of the source reach one."""

    def __init__(self, definitions: dict[str, list]) -> None:
        self.definitions = definitions
        self.by_name: dict[str, list[str]] = {}
        for qualified in definitions:
            self.by_name.setdefault(qualified.rsplit("::", 1)[-1], []).append(qualified)
        self.memo: dict[str, str | None] = {}

    def kind(self, call) -> str:
        """"barrier", "collective" (a simdgroup function, or a pure function of values that reaches only
        simdgroup functions), "inline" (a function of the source that reaches a barrier) or "plain"."""
        name = _callee_name(call)
        declared = call.referenced
        where = declared.location.file.name if declared is not None and declared.location.file else None
        if where is not None and where != "kernel.cpp":
            if where.endswith("sync.h"):
                if name in BARRIERS:
                    return "barrier"
                if COLLECTIVE.match(name):
                    return "collective"
            return "plain"
        candidates = ([_qualified(declared)] if declared is not None and where == "kernel.cpp"
                      else self.by_name.get(name, []))
        if declared is None and name in BARRIERS:
            return "barrier"
        if declared is None and COLLECTIVE.match(name):
            return "collective"  # a dependent call: shimkit's simdgroup function or a wrapper of one
        reached = [(c, self.reaches(c)) for c in candidates]
        reached = [(c, r) for c, r in reached if r is not None]
        if not reached:
            return "plain"
        if all(r == "collective" for _, r in reached):
            return "collective"
        return "inline"

    def reaches(self, qualified: str) -> str | None:
        """None, "collective" (a function of values reaching simdgroup functions only), or why not."""
        if qualified in self.memo:
            return self.memo[qualified]
        self.memo[qualified] = None  # recursion reaches nothing new
        verdict: str | None = None
        for definition in self.definitions.get(qualified, []):
            by_reference = any(cursors.kind(a.type) in ("POINTER", "LVALUEREFERENCE", "RVALUEREFERENCE")
                               for a in _parameters(definition))
            for node in cursors.walk(definition):
                if node.kind.name != "CALL_EXPR":
                    continue
                kind = self.kind(node)
                if kind == "inline":
                    verdict = "reaches threadgroup_barrier"
                    break
                if kind == "barrier":
                    verdict = f"reaches {_callee_name(node)}"
                    break
                if kind == "collective":
                    verdict = ("takes pointers or references and reaches simdgroup functions" if by_reference
                               else verdict or "collective")
            if verdict not in (None, "collective"):
                break
        self.memo[qualified] = verdict
        return verdict


class _GroupWriter:
    """Writes the group function of one kernel definition."""

    def __init__(self, source: _Source, kernel, parameters: list, reach: _Reach) -> None:
        self.src, self.source, self.kernel, self.reach = source, source.original, kernel, reach
        self.storage: list[str] = []   # per-thread copies of the parameters the kernel assigns
        self.declared: list[str] = []  # declarations to place before the statement being written
        # Per-thread arrays, masks and uniform values are declared once at the top of the group function:
        # nothing then stands between two regions that could run as one (see _join); those of a type the
        # body declares (or sized by its constants) stay where they are.
        self.top: list[str] = []
        self.parents: dict[str, str] = {}  # mask -> the mask it was made from (a thread in it is in that one)
        self.edits: list[tuple[int, int, str]] = []   # names qualified in inlined functions' bodies
        self.inlined: list[tuple[str | None, str]] = []  # (result, returned) of each function being inlined
        # The template arguments of each function being inlined (`using T = float;`), opened in each of its
        # regions rather than in its block, so that a region can join one outside the block.
        self.aliases: list[str] = []
        # A region tests an inlined function's `returned` flags only where one of its returns may have run
        # before it (`may_return`), and records the flags it tests and the masks such a test clears (an
        # inlined function whose mask nothing clears runs under its caller's).
        self.may_return: set[str] = set()
        self.tested: set[str] = set()
        self.cleared: set[str] = set()
        self.hoisted: list[str] = []  # names declared at group level (a region joined across them could see them)
        self.names = 0
        arguments = _parameters(kernel)
        if len(arguments) != len(parameters):
            raise Unsplittable("libclang and the front end read different parameter lists")
        self.body_cursor = _body(kernel)
        modified = self._modified(arguments, self.body_cursor)
        self.buffers: list[str] = []
        self.thread_values: list[tuple[str, str]] = []  # (name, declaration) of the kernel's thread parameters
        self.group_values: set[str] = set()  # the parameters with one value for the group (uniform.py's seeds)
        outer: list[tuple[str, str]] = []
        for argument, parameter in zip(arguments, parameters):
            name, spelled = argument.spelling, argument.type.spelling
            if parameter.kind == "buffer":
                # As the front end wrote it into the translation: `constant` is `const` (frontend.translate).
                self.buffers.append(re.sub(r"\bconstant\s+const\b|\bconst\s+constant\b", "constant", parameter.text))
                if name in modified:
                    storage = self._fresh("p")
                    self.storage.append(f"std::remove_cv_t<{spelled}> {storage}[{MAX_THREADS}]; "
                                        f"for (unsigned t = 0; t < shimkit_count; ++t) {storage}[t] = {name};")
                    outer.append((name, f"{storage}[shimkit_t]"))
                elif cursors.kind(argument.type) == "POINTER" or argument.type.get_pointee().is_const_qualified():
                    self.group_values.add(name)  # the pointer, or a `constant` value
                continue
            if name in modified:
                raise Unsplittable(f"it assigns its thread parameter {name}")
            if parameter.kind == "constant" or (parameter.kind == "index" and parameter.binding == "simds_per_group") \
                    or (parameter.kind == "position" and parameter.binding not in ("grid", "in_group")):
                self.group_values.add(name)
            if parameter.kind == "position":
                where = (f"shimkit_g.{parameter.binding}(shimkit_t).v" if parameter.binding in ("grid", "in_group")
                         else f"shimkit_g.base().{parameter.binding}")
                value = f"::shimkit_metal::from_position<{spelled}>({where})"
            elif parameter.kind == "index":
                value = f"::shimkit_metal::from_index<{spelled}>({THREAD_INDEX[parameter.binding]})"
            else:
                value = f"::shimkit_metal::from_index<{spelled}>({parameter.binding})"
            self.thread_values.append((name, f"auto {name} = {value};"))
        # (name, the thread's element it names in a region: `shimkit_v1[shimkit_t]`, or a value shared by
        # the group's threads) by block
        self.scopes: list[list[tuple[str, str]]] = [outer]
        self.replacing: list[tuple[int, int, str]] = []
        self.loop_depth = 0
        self.uniformity = Uniformity(
            self.body_cursor, lambda statement: bool(self._splits(statement)),
            lambda declared: cursors.kind(declared) == "PARM_DECL" and declared.semantic_parent == kernel
            and declared.spelling in self.group_values)

    # ---- text ----

    def _line(self, cursor) -> int:
        return _msl_line(self.source, self.src.start(cursor))

    def _text(self, start: int, end: int) -> str:
        """The source between two offsets, with the calls of the statement being split replaced and the
        names in inlined bodies qualified."""
        pieces, at = [], start
        # At one offset: insertions first, then the longest replacement.
        for a, b, replacement in sorted(self.replacing + self.edits, key=lambda e: (e[0], e[0] != e[1], -e[1])):
            if start <= a and b <= end and a >= at:
                pieces += [self.source[at:a].decode(), replacement]
                at = b
        pieces.append(self.source[at:end].decode())
        return "".join(pieces)

    def _statement_end(self, cursor) -> int:
        end = self.src.end(cursor)
        rest = self.source[end:end + 256]
        stripped = rest.lstrip()
        if stripped.startswith(b";"):
            return end + (len(rest) - len(stripped)) + 1
        return end

    def _code(self, cursor) -> str:
        """A statement's text on one line, with `return` taking the thread out of the kernel, or out of
        the function being inlined with its result stored."""
        start = self.src.start(cursor)
        end = self._statement_end(cursor)
        edits = []
        for node in [cursor, *cursors.walk(cursor)]:
            if cursors.kind(node) == "RETURN_STMT":
                value = list(node.get_children())
                at = self.src.start(node)
                if not self.inlined:
                    if value:
                        raise Unsplittable(f"line {self._line(node)}: returns a value")
                    edits.append((at, at + len("return"), "return false"))
                    continue
                result, returned = self.inlined[-1]
                returned_value = self._text(self.src.start(value[0]), self.src.end(value[0])) if value else ""
                if not returned_value.lstrip().startswith("{"):
                    returned_value = f"({returned_value})"  # `return {a, b};` assigns the braced list as it is
                stored = f"{result}[shimkit_t] = {returned_value}; " if value and result else ""
                edits.append((at, self._statement_end(node),
                              f"{{ {stored}{returned}[shimkit_t] = true; return true; }}"))
            elif cursors.kind(node) in ("GOTO_STMT", "INDIRECT_GOTO_STMT", "LABEL_STMT"):
                raise Unsplittable(f"line {self._line(node)}: goto")
        if self.loop_depth:
            self._check_jumps(cursor)
        pieces, at = [], start
        for a, b, replacement in sorted(edits):
            if a < at:
                continue
            pieces += [self._text(at, a), replacement]
            at = b
        pieces.append(self._text(at, end))
        lines = "".join(pieces).split("\n")
        return " ".join(line for line in lines if not line.lstrip().startswith("#")).strip()

    def _check_jumps(self, cursor) -> None:
        """break / continue that would leave a split loop from inside a region."""
        def visit(node, inside_loop: bool, inside_switch: bool) -> None:
            kind = node.kind.name
            if kind == "BREAK_STMT" and not inside_loop and not inside_switch:
                raise Unsplittable(f"line {self._line(node)}: break out of a loop with a barrier")
            if kind == "CONTINUE_STMT" and not inside_loop:
                raise Unsplittable(f"line {self._line(node)}: continue in a loop with a barrier")
            if kind == "LAMBDA_EXPR":
                return
            for child in node.get_children():
                visit(child, inside_loop or kind in LOOPS, inside_switch or kind == "SWITCH_STMT")
        visit(cursor, False, False)

    def _fresh(self, what: str) -> str:
        self.names += 1
        return f"shimkit_{what}{self.names}"

    def _modified(self, parameters: list, body) -> set[str]:
        """The parameters the body may assign: ``p = ...``, ``p += ...``, ``++p``, ``p.x = ...``,
        ``p[0] = ...`` (for a value, not a pointer), or whose address it takes."""
        kinds = {p.spelling: cursors.kind(p.type) for p in parameters}
        tokens = [t.spelling for t in body.get_tokens()]
        modified = set()
        for i, token in enumerate(tokens):
            if token not in kinds or (i > 0 and tokens[i - 1] in (".", "->", "::")):
                continue
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            before = tokens[i - 1] if i > 0 else ""
            if after == "." and i + 3 < len(tokens):
                after = tokens[i + 3]  # p.x = ...
            elif after == "[" and kinds[token] not in ("POINTER", "LVALUEREFERENCE", "RVALUEREFERENCE"):
                depth, j = 0, i + 1
                while j < len(tokens):
                    depth += {"[": 1, "]": -1}.get(tokens[j], 0)
                    if depth == 0:
                        break
                    j += 1
                after = tokens[j + 1] if j + 1 < len(tokens) else ""
            unary_address = before == "&" and i > 1 and not re.match(r"^\w+$|^[)\]]$", tokens[i - 2])
            if after in ASSIGNMENTS or before in ("++", "--") or unary_address:
                modified.add(token)
        return modified

    # ---- classification ----

    def _splits(self, cursor) -> list:
        """The split-point calls in a statement: barrier and simdgroup calls (outside lambdas)."""
        found = []
        for node in [cursor, *cursors.walk(cursor)]:
            if cursors.kind(node) == "CALL_EXPR" and self.reach.kind(node) != "plain" and not any(
                    a <= self.src.start(node) and self.src.end(node) <= b for a, b, _ in self.replacing):
                found.append(node)
        return found

    # ---- writing ----

    def write(self) -> str:
        # The front end's dry call that measures threadgroup memory calls the kernel, not its group
        # function; reading its thread_local flag once per group instead of in a region keeps a
        # `__tls_get_addr` call out of every thread's iteration.
        body = self._block(list(self.body_cursor.get_children()), "shimkit_g.alive").replace(
            "::shimkit_metal::measuring", "shimkit_measuring")
        start = self.src.start(self.kernel)
        name_at = self.src.start(next(t for t in self.kernel.get_tokens() if t.spelling == self.kernel.spelling))
        head = " ".join(self._text(start, name_at).split()) + " "
        parameters = ", ".join([*self.buffers, "const ::shimkit_metal::ThreadInfo& shimkit_base",
                                "::shimkit_metal::uint shimkit_count"])
        return (f"{head}SHIMKIT_GROUP_FUNCTION {self.kernel.spelling}{SPLIT_SUFFIX}({parameters}) {{ "
                f"::shimkit_metal::LoopGroup shimkit_g(shimkit_base, shimkit_count); "
                f"const bool shimkit_measuring = ::shimkit_metal::measuring; (void)shimkit_measuring; "
                f"{' '.join(self.storage)} {' '.join(self.top)} {body} }}")

    def _preamble(self, mask: str, code: str) -> tuple[str, str]:
        """Each region's opening: the thread's coordinates that ``code`` names (the others would cost a
        division per thread for a group that is not flat), its per-thread variables by their names, and
        (in an inlined function) leaving the region when the thread has returned from it."""
        opening = " ".join([*self.aliases, *(d for name, d in self.thread_values if re.search(rf"\b{name}\b", code))])
        for _, returned in self.inlined:
            if returned in self.may_return:
                opening += f" if ({returned}[shimkit_t]) {{ {mask}[shimkit_t] = false; return true; }}"
                self.tested.add(returned)
                self.cleared.add(mask)
        # The returns in this region's code take effect for the regions written after it (a thread that
        # returns leaves this one there and then); regions run in the order they are written but for a
        # loop's, which _inline sees to.
        self.may_return.update(returned for _, returned in self.inlined if f"{returned}[shimkit_t] = true" in code)
        bindings, closing = self._scope_bindings(lambda name, storage: True)
        return opening + bindings, closing

    def _scope_bindings(self, keep: Callable[[str, str], bool]) -> tuple[str, str]:
        """The variables in scope that ``keep(name, storage)`` selects, bound by their names: one nested
        ``{ auto& name = storage; ... }`` per scope, innermost last (an inner name hides an outer one), and
        the braces that close them."""
        opening = closing = ""
        for scope in self.scopes:
            kept = [(name, storage) for name, storage in scope if keep(name, storage)]
            if kept:
                opening += " { " + " ".join(f"auto& {name} = {storage};" for name, storage in kept)
                closing += " }"
        return opening, closing

    def _bound(self, code: str) -> str:
        """``decltype(x)`` of a per-thread variable names its declared type, not the reference the region
        binds to it (Inductor writes ``static_cast<decltype(tmp3)>(...)``)."""
        names = {name for scope in self.scopes for name, _ in scope}
        if not names or "decltype" not in code:
            return code
        return re.sub(r"\bdecltype\s*\(\s*([A-Za-z_]\w*)\s*\)",
                      lambda m: f"std::remove_reference_t<decltype({m.group(1)})>" if m.group(1) in names
                      else m.group(0), code)

    def _group_bindings(self, code: str) -> tuple[str, str]:
        """What group-level code that reads uniform values opens and closes with: the uniform thread
        parameters it names and the variables in scope that are one value for the group (uniform.py)."""
        opening = " ".join([*self.aliases, *(d for name, d in self.thread_values
                                              if name in self.group_values and re.search(rf"\b{name}\b", code))])
        bindings, closing = self._scope_bindings(
            lambda name, storage: "shimkit_t" not in storage and re.search(rf"\b{name}\b", code) is not None)
        return opening + bindings, closing

    def _group_value(self, expression: str) -> str:
        """A uniform condition evaluated once for the group."""
        expression = self._bound(expression)
        opening, closing = self._group_bindings(expression)
        return (f"[&]() __attribute__((always_inline)) -> bool {{ {opening} "
                f"return static_cast<bool>({expression}); {closing} }}()")

    def _group_statement(self, mask: str, code: str) -> str:
        """An assignment of a uniform variable run once for the group, where a thread of ``mask`` runs (a
        uniform value may divide by a zero that no thread reaches)."""
        code = self._bound(code)
        opening, closing = self._group_bindings(code)
        return f"if (shimkit_g.any({mask})) {{ {opening} {code} {closing} }}"

    def _assign_uniform(self, mask: str, code: str, name: str, out: list[str], pending: list[str],
                        flush: Callable[..., None]) -> None:
        """Writes a uniform assignment at group level, before the pending statements unless they read
        the variable (nothing else they do can change a uniform value)."""
        if any(re.search(rf"\b{name}\b", entry) for entry in pending):
            flush()
        out.append(self._group_statement(mask, code))

    def _store(self, declaration: str) -> str:
        """Declares storage at the top of the group function; returns what stays where it is (the
        declaration, where it names a type or constant the body declares)."""
        if set(self.hoisted) & set(re.findall(r"[A-Za-z_]\w*", declaration)):
            return declaration
        self.top.append(declaration)
        return ""

    def _region(self, mask: str, code: str) -> str:
        return _Region(mask, self._fragment(mask, code)) if code.strip() else ""

    def _fragment(self, mask: str, code: str) -> str:
        """A region's code for one thread, with its preamble."""
        code = self._bound(code)
        opening, closing = self._preamble(mask, code)
        return f"{opening} {code} {closing}"

    def _thread_code(self, mask: str, pending: list[str]) -> str:
        """One thread's code in a region for the pending statements, with the preamble that binds their
        names, and the code carried in from a caller (_Carried: already bound)."""
        pieces: list[str] = []
        statements: list[str] = []

        def bind() -> None:
            code = " ".join(statements)
            statements.clear()
            if code.strip():
                pieces.append(self._fragment(mask, code))

        for entry in pending:
            if isinstance(entry, _Carried):
                bind()
                pieces.append(entry)
            else:
                statements.append(entry)
        bind()
        return pieces[0] if len(pieces) == 1 else " ".join(f"{{ {piece} }}" for piece in pieces)

    def _carried(self, mask: str, pending: list[str], hidden: set[str]) -> _Carried | None:
        """The pending statements as one thread's code for a region to come, which ``hidden`` names are
        visible in; None where they would hide a name of theirs."""
        text = " ".join(pending)
        if not text.strip() or hidden & set(re.findall(r"[A-Za-z_]\w*", text)):
            return None
        code = self._thread_code(mask, pending)
        pending.clear()
        return _Carried(code)

    def _join(self, before, mask: str, pending: list[str]) -> _Text | None:
        """``before`` (group-level code) with the region that would follow it under ``mask`` joined to the
        region it ends with, where nothing but the ends of blocks lies between them (the last region of an
        inlined function, and its caller's statements after the call): one loop over the threads instead
        of two. None where that does not apply."""
        text = " ".join(pending)
        if not text.strip():
            return None
        return self._joined(before, mask, mask, text, lambda: self._thread_code(mask, pending))

    def _joined(self, before, mask: str, then: str, text: str, fragment: Callable[[], str]) -> _Text | None:
        """``before`` with ``fragment()`` (one thread's code, naming what ``text`` names) run for the
        threads of ``then`` (``mask`` or a mask the region before sets) right after the region ``before``
        ends with, in one loop over ``mask``'s threads. That region runs under ``mask`` or under a mask
        made from it (an inlined function's: it then runs for that mask's threads only). No two threads
        are ordered between two barriers, so one thread's both parts may run before the next thread's."""
        last = before if isinstance(before, _Region) else before.last if isinstance(before, _Text) else None
        if last is None or (last.mask != mask and not self._within(last.mask, mask)):
            return None
        hidden: set[str] = before.hidden if isinstance(before, _Text) else set()
        at = before.rindex(last)
        if before[at + len(last):].strip(" }"):
            return None
        if hidden & set(re.findall(r"[A-Za-z_]\w*", text)):
            return None  # a name the blocks between declare would hide the caller's
        # The first part's returns leave it alone; a thread it took out of the mask skips the second.
        only = "" if last.mask == mask else f"{last.mask}[shimkit_t] && "
        joined = _Region(mask, f"if ({only}![&]() -> bool {{ {last.fragment} return true; }}()) return false; "
                               f"if (!{then}[shimkit_t]) return true; {{ {fragment()} }}")
        first = before.first if isinstance(before, _Text) else last
        return _Text(before[:at] + joined + before[at + len(last):], joined, hidden, joined if first is last else first)

    def _within(self, mask: str, outer: str) -> bool:
        """Whether ``mask`` was made from ``outer`` (directly or through other masks)."""
        while mask in self.parents:
            mask = self.parents[mask]
            if mask == outer:
                return True
        return False

    def _collective(self, mask: str, call: str, code: str, reaches: int) -> str:
        call, code = self._bound(call), self._bound(code)
        opening, closing = self._preamble(mask, call)
        statement_opening, statement_closing = self._preamble(mask, code)
        return (f"shimkit_g.collective<{reaches}>({mask}, [&](unsigned shimkit_t) -> bool {{ {opening} (void)({call}); "
                f"{closing} return true; }}, "
                f"[&](unsigned shimkit_t) -> bool {{ {statement_opening} {code} {statement_closing} return true; }});")

    def _evaluate(self, mask: str, cursor, code: Callable[[], str]) -> str:
        """Runs ``code()`` (which evaluates ``cursor``) per thread: a region, or a split around its
        simdgroup calls. The calls are evaluated left to right, each into a local that the statement
        reads instead (C++ leaves the order of operands unspecified; the replay needs one)."""
        splits = self._splits(cursor)
        if not splits:
            return self._region(mask, code())
        outermost = self._outermost(cursor, splits)
        direct = self._direct(mask, outermost, code)
        if direct is not None:
            storage, operands, combine, statement = direct
            return f"{{ {storage} {self._region(mask, operands)} {combine} {self._region(mask, statement)} }}"
        calls = [self._code_of_expression(call) for call in outermost]
        names = [self._fresh("c") for _ in outermost]
        saved = self.replacing
        self.replacing = [*saved, *((self.src.start(c), self.src.end(c), n) for c, n in zip(outermost, names))]
        try:
            statement = code()
        finally:
            self.replacing = saved
        values = " ".join(f"auto {name} = {call};" for name, call in zip(names, calls))
        return self._collective(mask, ", ".join(f"(void)({call})" for call in calls), f"{values} {statement}",
                                self._reaches(outermost))

    def _outermost(self, cursor, splits: list) -> list:
        """The simdgroup calls of an expression that no other contains, left to right."""
        line = self._line(cursor)
        if any(self.reach.kind(c) in ("barrier", "inline") for c in splits):
            raise Unsplittable(f"line {line}: a barrier inside an expression")
        outermost = sorted((c for c in splits if not any(c is not o and _inside(c, o) for o in splits)),
                           key=lambda c: c.extent.start.offset)
        for call in outermost:
            if any(t.spelling in ASSIGNMENTS for t in call.get_tokens()):
                raise Unsplittable(f"line {line}: a simdgroup function call whose operands assign")
        return outermost

    def _direct(self, mask: str, outermost: list, code: Callable[[], str]) -> tuple[str, str, str, str] | None:
        """One call of sync.h's simdgroup functions whose operands reach none: the operands are evaluated
        into per-thread arrays, each simdgroup combines them (``metal::lanes``, the combine the fibers
        use), and the statement reads the result, instead of evaluating the call through lane records
        twice. Returns the arrays' declarations, the operands' per-thread assignments, the combine and the
        statement; None where that does not apply (the statement then splits as a collective)."""
        if len(outermost) != 1:
            return None
        call = outermost[0]
        declared = call.referenced
        name = _callee_name(call)
        if (name not in DIRECT or declared is None or declared.location.file is None
                or not declared.location.file.name.endswith("sync.h")):
            return None
        parameters, arguments = _parameters(declared), list(call.get_arguments())
        if len(parameters) != len(arguments) or any(self._splits(argument) for argument in arguments):
            return None
        types = [_nameable(parameter.type) for parameter in parameters] + [_nameable(declared.result_type)]
        if any(t is None for t in types):
            return None
        operands, evaluate, storage = [], [], []
        for argument, parameter, type_ in zip(arguments, parameters, types):
            # An operand that is a per-thread variable of the parameter's type is combined from its array.
            element = self._variable_element(argument, parameter.type.get_canonical(), arguments)
            if element is not None and element.endswith("[shimkit_t]"):
                operands.append(element[:-len("[shimkit_t]")])
                continue
            operands.append(self._fresh("o"))
            evaluate.append(f"{operands[-1]}[shimkit_t] = ({self._code_of_expression(argument)});")
            storage.append(self._store(f"std::remove_cv_t<{type_}> {operands[-1]}[{MAX_THREADS}];"))
        result = self._fresh("c")
        storage.append(self._store(f"std::remove_cv_t<{types[-1]}> {result}[{MAX_THREADS}];"))
        saved = self.replacing
        self.replacing = [*saved, (self.src.start(call), self.src.end(call), f"{result}[shimkit_t]")]
        try:
            statement = code()
        finally:
            self.replacing = saved
        pointers = ", ".join(f"{n} + shimkit_first" for n in [result, *operands])
        combine = (f"shimkit_g.lanes({mask}, [&](const bool* shimkit_on, unsigned shimkit_first) {{ "
                   f"::metal::lanes::{name}(shimkit_on, {pointers}); }});")
        return " ".join(a for a in storage if a), " ".join(evaluate), combine, statement

    def _reaches(self, calls: list) -> int:
        """At most how many combines evaluating ``calls`` reaches, when each call in them is one of
        shimkit's simdgroup functions; 0 when that is not known (a function of the source)."""
        count = 0
        for call in calls:
            for node in [call, *cursors.walk(call)]:
                if node.kind.name != "CALL_EXPR" or self.reach.kind(node) != "collective":
                    continue
                declared = node.referenced
                if declared is None or declared.location.file is None or not declared.location.file.name.endswith(
                        "sync.h"):
                    return 0
                count += 2 if _callee_name(node) in TWO_COMBINES else 1
        return count

    def _block(self, statements: list, mask: str, carried: _Carried | None = None) -> _Text:
        """The group-level code of a block; ``carried``: a region's code that runs first in its first region
        (an inlined function's caller's statements before the call)."""
        out: list[str] = _Out()
        pending: list[str] = [carried] if carried else []
        hoisted_from = len(self.hoisted)

        def flush(prelude: str = "") -> None:
            """Writes the pending statements as a region, after ``prelude`` (group-level code)."""
            joined = self._join(out[-1], mask, pending) if out else None
            if joined is not None:
                out[-1:] = [text for text in (prelude, joined) if text]
            else:
                code = self._thread_code(mask, pending)
                out.extend(text for text in (prelude, _Region(mask, code) if code.strip() else "") if text)
            pending.clear()

        index = 0
        while index < len(statements):
            before = len(out)
            if index + 1 < len(statements) and self._uniform_early_return(statements[index], statements[index + 1]):
                self._speculated_return(statements[index], statements[index + 1], mask, out, pending, flush)
                index += 2
            else:
                self._statement(statements[index], mask, out, pending, flush)
                index += 1
            out[before:before] = [text for text in self.declared if text.strip()]
            self.declared = []
        flush()
        out = [text for text in out if text]
        return _ending(" ".join(out), out[-1] if out else None, set(self.hoisted[hoisted_from:]),
                       out[0] if out else None)

    def _statement(self, statement, mask: str, out: list[str], pending: list[str], flush: Callable[..., None]) -> None:
        kind = statement.kind.name
        splits = self._splits(statement)
        inline = [c for c in splits if self.reach.kind(c) == "inline"]
        if not inline:
            # A function of the source that reaches only simdgroup functions (c10's NaN-propagating
            # simd_max, simd_argmax) is inlined too where it is a whole statement's call: each simdgroup
            # function in it then splits alone, with one evaluation, instead of re-evaluating the call.
            inline = [c for c in splits if self._inlinable_collective(statement, c, splits)]
        if inline:
            call = self._inline_call(statement, inline, splits)
            result = self._inline(call, mask, out, pending, flush)
            saved = self.replacing
            self.replacing = [*saved, (self.src.start(call), self.src.end(call),
                                       f"{result}[shimkit_t]" if result else "(void)0")]
            try:
                self._statement(statement, mask, out, pending, flush)
            finally:
                self.replacing = saved
            return
        if kind == "DECL_STMT":
            if not splits:
                uniform: list[tuple[str, str]] = []
                pending.append(self._declaration(statement, uniform) or "")
                for name, code in uniform:
                    self._assign_uniform(mask, code, name, out, pending, flush)
            elif not self._split_directly(statement, splits, mask, out, pending, flush,
                                          lambda: self._declaration(statement) or ""):
                flush()
                out.append(self._evaluate(mask, statement, lambda: self._declaration(statement) or ""))
            return
        if not splits:
            if kind in ("BREAK_STMT", "CONTINUE_STMT") and self.loop_depth:
                raise Unsplittable(f"line {self._line(statement)}: {kind.split('_')[0].lower()} "
                                   f"in a loop with a barrier")
            target = written(statement)
            if target is not None and target.hash in self.uniformity.variables:
                self._assign_uniform(mask, self._code(statement), target.spelling, out, pending, flush)
            else:
                pending.append(self._code(statement))
            return
        if kind == "IF_STMT":
            self._if(statement, mask, out, pending, flush)
            return
        expression = kind.endswith("_EXPR") or kind.endswith("_OPERATOR") or kind == "RETURN_STMT"
        if expression and not (kind == "CALL_EXPR" and self.reach.kind(statement) == "barrier") and \
                self._split_directly(statement, splits, mask, out, pending, flush, lambda: self._code(statement)):
            return
        flush()
        if kind == "COMPOUND_STMT":
            out.append(self._scoped(list(statement.get_children()), mask))
        elif kind in LOOPS:
            out.append(self._loop(statement, mask))
        elif kind.endswith("_EXPR") or kind.endswith("_OPERATOR") or kind == "RETURN_STMT":
            if kind == "CALL_EXPR" and self.reach.kind(statement) == "barrier":
                out.append(BARRIER)  # the boundary between two regions: nothing joins across it
                return
            out.append(self._evaluate(mask, statement, lambda: self._code(statement)))
        else:
            raise Unsplittable(f"line {self._line(statement)}: a barrier or simdgroup function "
                               f"inside {kind.lower().replace('_stmt', '')}")

    def _split_directly(self, statement, splits: list, mask: str, out: list[str], pending: list[str],
                        flush: Callable[..., None], code: Callable[[], str],
                        evaluated_to: Callable[[str], None] | None = None) -> bool:
        """A statement split at a direct simdgroup call (``_direct``) shares its regions: its operands are
        evaluated with the statements before it, and it runs with those after (no thread waits for
        another between two split points). ``evaluated_to`` takes the statement's code after the combine
        instead of the next region."""
        direct = self._direct(mask, self._outermost(statement, splits), code)
        if direct is None:
            return False
        storage, operands, combine, evaluated = direct
        if storage:
            self.declared.append(storage)
        # A thread that returns from an inlined function in the region before the combine takes no part
        # in it (the next region's test would take it out of the mask only after the combine).
        leaving = [re.sub(r"(shimkit_x\d+\[shimkit_t\] = true; )return true;", rf"\1{mask}[shimkit_t] = false; return true;",
                          entry) for entry in pending]
        if leaving != pending:
            self.cleared.add(mask)
            pending[:] = [_Carried(new) if isinstance(old, _Carried) else new for old, new in zip(pending, leaving)]
        pending.append(operands)
        flush()
        out.append(combine)
        (evaluated_to or pending.append)(evaluated)
        return True

    # ---- a simdgroup-uniform early return ----

    def _uniform_early_return(self, statement, following) -> bool:
        """``if (simd_any(...)) return a; return f(simd_max(x));`` as an inlined function's two
        statements (c10's NaN-propagating simd_max and simd_min): the vote is one value for every active
        lane of a simdgroup, so a simdgroup's lanes all return early or none does, and the second combine
        may run for every lane, its result unused where the vote was taken. The two then need no returned
        flag and no mask: ``return vote ? a : f(max)`` after both combines. Only where that speculation is
        harmless: the second call's operands are variables, literals and conversions to floating point
        (nothing read from memory, nothing that can trap), and both values have one arithmetic type."""
        if not self.inlined or self.inlined[-1][0] is None or self.loop_depth:
            return False
        if cursors.kind(statement) != "IF_STMT" or cursors.kind(following) != "RETURN_STMT":
            return False
        children = list(statement.get_children())
        if len(children) != 2:
            return False
        condition, then = children
        if cursors.kind(then) == "COMPOUND_STMT":
            inner = list(then.get_children())
            if len(inner) != 1:
                return False
            then = inner[0]
        if cursors.kind(then) != "RETURN_STMT" or self._splits(then):
            return False
        early, late = list(then.get_children()), list(following.get_children())
        if len(early) != 1 or len(late) != 1:
            return False
        vote = self._single_direct_call(condition)
        if vote is None or _callee_name(vote) not in UNIFORM_VOTES or cursors.unwrapped(condition) != vote:
            return False
        call = self._single_direct_call(following)
        if call is None or not all(_speculable(argument) for argument in call.get_arguments()):
            return False
        types = {value.type.get_canonical().spelling for value in (early[0], late[0])}
        return len(types) == 1 and _arithmetic(late[0].type.get_canonical())

    def _single_direct_call(self, cursor):
        """The one simdgroup call in ``cursor`` when it is one of sync.h's on operands that reach none
        (what ``_direct`` combines over arrays), else None."""
        splits = self._splits(cursor)
        outermost = [c for c in splits if not any(c is not o and _inside(c, o) for o in splits)]
        if len(outermost) != 1 or len(splits) != 1:
            return None
        call = outermost[0]
        declared = call.referenced
        if (_callee_name(call) not in DIRECT or self.reach.kind(call) != "collective" or declared is None
                or declared.location.file is None or not declared.location.file.name.endswith("sync.h")):
            return None
        return call

    def _speculated_return(self, statement, following, mask: str, out: list[str], pending: list[str],
                           flush: Callable[..., None]) -> None:
        """Writes what ``_uniform_early_return`` accepted: the vote's combine, then the return whose
        value chooses between the two. A vote ``_direct`` declines (a type it cannot name) leaves both
        statements to the general way, before anything is written."""
        condition, then = list(statement.get_children())
        if cursors.kind(then) == "COMPOUND_STMT":
            then = list(then.get_children())[0]
        early = list(then.get_children())[0]
        votes: list[str] = []
        if not self._split_directly(condition, self._splits(condition), mask, out, pending, flush,
                                    lambda: self._code_of_expression(condition), votes.append):
            self._statement(statement, mask, out, pending, flush)
            self._statement(following, mask, out, pending, flush)
            return
        late = list(following.get_children())[0]
        start, end = self.src.start(late), self.src.end(late)
        choice = f"(({votes[0]}) ? ({self._text(self.src.start(early), self.src.end(early))}) : ("
        saved = self.replacing
        self.replacing = [*saved, (start, start, choice), (end, end, "))")]
        try:
            self._statement(following, mask, out, pending, flush)
        finally:
            self.replacing = saved

    # ---- inlining ----

    def _inlinable_collective(self, statement, call, splits: list) -> bool:
        declared = call.referenced
        if (self.reach.kind(call) != "collective" or declared is None or declared.location.file is None
                or declared.location.file.name != "kernel.cpp" or cursors.kind(declared) == "CXX_METHOD"
                or len(self.inlined) >= MAX_INLINE_DEPTH):
            return False
        if any(c is not call and _inside(call, c) for c in splits) or len(
                [c for c in splits if not any(c is not o and _inside(c, o) for o in splits)]) != 1:
            return False
        if statement.kind.name not in ("DECL_STMT", "RETURN_STMT") and not (
                cursors.kind(statement).endswith("_EXPR") or cursors.kind(statement).endswith("_OPERATOR")):
            return False
        if any(cursors.kind(p.type) == "LVALUEREFERENCE" for p in _parameters(declared)):
            return False
        return not any(cursors.kind(n) == "CONDITIONAL_OPERATOR" and _inside(call, n) for n in cursors.walk(statement))

    def _inline_call(self, statement, inline: list, splits: list):
        """The one call to inline in ``statement``: outermost, and evaluated unconditionally."""
        line = self._line(statement)
        if statement.kind.name not in ("DECL_STMT", "RETURN_STMT") and not (
                cursors.kind(statement).endswith("_EXPR") or cursors.kind(statement).endswith("_OPERATOR")):
            raise Unsplittable(f"line {line}: a call to {_callee_name(inline[0])}, which reaches a barrier, inside "
                               f"{statement.kind.name.lower().replace('_stmt', '')}")
        outermost = [c for c in inline if not any(c is not o and _inside(c, o) for o in splits)]
        if len(outermost) != 1 or len(inline) != 1:
            raise Unsplittable(f"line {line}: calls to functions with barriers nested or side by side")
        call = outermost[0]
        for node in [statement, *cursors.walk(statement)]:
            if cursors.kind(node) == "CONDITIONAL_OPERATOR" and _inside(call, node):
                raise Unsplittable(f"line {line}: a call to {_callee_name(call)}, which reaches a barrier, under ?:")
        return call

    def _inline(self, call, mask: str, out: list[str], pending: list[str], flush: Callable[..., None]) -> str | None:
        """Writes the body of the function ``call`` calls at group level; returns the per-thread array of
        its results (None for void). The body is the instantiation Clang made for this call, so its
        variables have their types; its names are qualified, as they are looked up where it is written.
        Its arguments are evaluated in one region with the caller's statements before the call."""
        name, line = _callee_name(call), self._line(call)
        declared = call.referenced
        if len(self.inlined) >= MAX_INLINE_DEPTH:
            raise Unsplittable(f"line {line}: functions with barriers nested more than {MAX_INLINE_DEPTH} deep")
        definition = declared if declared is not None and _body(declared) is not None else (
            declared.get_definition() if declared is not None else None)
        if definition is None or _body(definition) is None:
            raise Unsplittable(f"line {line}: it calls {name}, which reaches a barrier and whose definition "
                               f"Clang cannot resolve here (a call in a template) to inline")
        if cursors.kind(definition) == "CXX_METHOD":
            raise Unsplittable(f"line {line}: it calls member function {name}, which reaches a barrier "
                               f"(member functions are not inlined)")
        parameters, arguments = _parameters(definition), list(call.get_arguments())
        if len(parameters) != len(arguments):
            raise Unsplittable(f"line {line}: the call to {name} leaves default arguments out")
        from clang import cindex
        result_type = definition.result_type.get_canonical()
        result = None if cursors.kind(result_type) == "VOID" else self._fresh("r")
        returned, inner = self._fresh("x"), self._fresh("m")
        storage = [self._store(f"std::remove_cv_t<{result_type.spelling}> {result}[{MAX_THREADS}];") if result else ""]
        parts = ["{"]
        aliases: list[str] = []
        template_names: list[str] = []
        pattern = cindex.conf.lib.clang_getSpecializedCursorTemplate(definition)
        if pattern is not None and cursors.kind(pattern) == "FUNCTION_TEMPLATE":
            template_names = names = [c.spelling for c in pattern.get_children()
                     if cursors.kind(c) in ("TEMPLATE_TYPE_PARAMETER", "TEMPLATE_NON_TYPE_PARAMETER")]
            for index, parameter in enumerate(names):
                if not parameter:
                    continue  # unnamed (`typename = enable_if_t<...>`): the body cannot refer to it
                try:
                    kind = definition.get_template_argument_kind(index).name
                except ValueError:  # libclang has no name for the kind (a pack, a template template argument)
                    kind = "unknown"
                if kind == "TYPE":
                    aliases.append(f"using {parameter} = {definition.get_template_argument_type(index).get_canonical().spelling};")
                elif kind == "INTEGRAL":
                    aliases.append(f"constexpr auto {parameter} = {definition.get_template_argument_value(index)};")
                else:
                    raise Unsplittable(f"line {line}: {name} has a template argument of kind {kind.lower()}")
        bound, assignments, shared = [], [], []
        modified = self._modified(parameters, _body(definition))
        for parameter, argument in zip(parameters, arguments):
            kind = cursors.kind(parameter.type)
            declared_type = parameter.type.get_canonical()
            if kind == "LVALUEREFERENCE" and not declared_type.get_pointee().is_const_qualified():
                raise Unsplittable(f"line {line}: {name} takes {parameter.spelling} by reference")
            if kind in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
                declared_type = declared_type.get_pointee()
            if self._splits(argument):
                raise Unsplittable(f"line {line}: an argument of {name} has a barrier or simdgroup function")
            value = self._code_of_expression(argument)
            if parameter.spelling and parameter.spelling not in modified:
                # A parameter the body leaves alone names the caller's element where the argument is a
                # per-thread variable of its type, or one value for the group where it is a constant: no
                # per-thread copy.
                same = self._variable_element(argument, declared_type, arguments)
                if same is not None:
                    bound.append((parameter.spelling, same))
                    continue
                group_value = self._group_parameter(argument)
                if group_value is not None:
                    value = group_value
                if group_value is not None or self._uniform(argument):
                    constant = self._fresh("u")
                    declaration = f"const std::remove_cv_t<{declared_type.spelling}> {constant} = ({value});"
                    if set(self.hoisted) & set(re.findall(r"[A-Za-z_]\w*", value)):
                        shared.append(declaration)  # names a constant the body declares: where it is
                    else:
                        self.top.append(declaration)  # one value for the whole group function
                    bound.append((parameter.spelling, constant))
                    continue
            array = self._fresh("a")
            storage.append(self._store(f"std::remove_cv_t<{declared_type.spelling}> {array}[{MAX_THREADS}];"))
            assignments.append(f"{array}[shimkit_t] = ({value});")
            if parameter.spelling:
                bound.append((parameter.spelling, f"{array}[shimkit_t]"))
        if any(storage):
            out.append(" ".join(a for a in storage if a))
        pending.append(" ".join(assignments))
        # The caller's statements before the call (and its arguments) run in the body's first region,
        # unless a name the body's block declares would hide one of theirs.
        top = {c.spelling for statement in _body(definition).get_children() if cursors.kind(statement) == "DECL_STMT"
               for c in statement.get_children()}
        carried = self._carried(mask, pending, top | set(template_names))
        if carried is None:
            flush()
        parts += shared  # constants: the same before and after the caller's statements
        flags_at = len(parts)
        self._qualify(_body(definition))
        if pattern is not None and cursors.kind(pattern) == "FUNCTION_TEMPLATE" and _body(pattern) is not None:
            self._qualify(_body(pattern))  # the instantiation leaves out some type sugar (opmath_t<T>)
        saved_scopes, saved_depth, saved_uniformity = self.scopes, self.loop_depth, self.uniformity
        self.scopes, self.loop_depth = [[], bound], 0  # the callee sees its parameters, not the caller's names
        group_parameters = {name for name, element in bound if "shimkit_t" not in element}
        self.uniformity = Uniformity(
            _body(definition), lambda statement: bool(self._splits(statement)),
            lambda declared: cursors.kind(declared) == "PARM_DECL" and declared.semantic_parent == definition
            and declared.spelling in group_parameters)
        self.inlined.append((result, returned))
        saved_aliases, self.aliases = self.aliases, aliases
        if _returns_in_loop(_body(definition)):
            self.may_return.add(returned)  # the loop's next iteration runs after the return
        try:
            body = self._block(list(_body(definition).get_children()), inner, carried)
        finally:
            self.scopes, self.loop_depth, self.uniformity = saved_scopes, saved_depth, saved_uniformity
            self.inlined.pop()
            self.aliases = saved_aliases
        # The flag and the mask exist only where a region tests or clears them: a thread's return from a
        # function that returns last (c10's threadgroup_* helpers) leaves it by leaving its last region.
        flags = ""
        if returned in self.tested:
            self.top.append(f"bool {returned}[{MAX_THREADS}];")
            flags = f"std::memset({returned}, 0, shimkit_count);"
        else:
            body = body.map(lambda text: text.replace(f"{returned}[shimkit_t] = true; ", ""))
        if inner in self.cleared:
            self.parents[inner] = mask
            self.top.append(f"bool {inner}[{MAX_THREADS}];")
            flags += f" std::memcpy({inner}, {mask}, shimkit_count);"
        else:
            body = body.map(lambda text: re.sub(rf"\b{inner}\b", mask, text))
        parts[flags_at:flags_at] = [flags, body, "}"]
        out.append(_ending(" ".join(p for p in parts if p), body, body.hidden | set(template_names), body))
        return result

    def _variable_element(self, argument, declared_type, arguments: list) -> str | None:
        """The element a per-thread variable of the caller names, where ``argument`` is that variable alone,
        of the parameter's type and no other argument names it (which could change it through a pointer)."""
        reference = cursors.unwrapped(argument)
        if cursors.kind(reference) != "DECL_REF_EXPR" or reference.referenced is None:
            return None
        name = reference.spelling
        element = next((e for scope in reversed(self.scopes) for n, e in reversed(scope) if n == name), None)
        variable_type = reference.referenced.type.get_canonical()
        if (element is None or declared_type.is_const_qualified() or variable_type.is_const_qualified()
                or variable_type.spelling != declared_type.spelling):
            return None
        if any(a is not argument and any(t.spelling == name for t in a.get_tokens()) for a in arguments):
            return None
        return element

    def _uniform(self, argument) -> bool:
        """Whether an argument has one value for the whole group all through the call: a literal, or a
        constant, an array (its address) or a buffer parameter of the kernel, none of them per thread."""
        expression = cursors.unwrapped(argument)
        kind = cursors.kind(expression)
        if kind in ("INTEGER_LITERAL", "FLOATING_LITERAL", "CXX_BOOL_LITERAL_EXPR"):
            return True
        declared = expression.referenced if kind == "DECL_REF_EXPR" else None
        if declared is None:
            return False
        name = expression.spelling
        if any(n == name for scope in self.scopes for n, _ in scope) or any(n == name for n, _ in self.thread_values):
            return False
        if cursors.kind(declared) == "ENUM_CONSTANT_DECL":
            return True
        if cursors.kind(declared) == "PARM_DECL":
            return declared.semantic_parent == self.kernel  # a buffer (per-thread copies are in scopes)
        return cursors.kind(declared) == "VAR_DECL" and (declared.type.is_const_qualified()
                                                 or cursors.kind(declared.type) == "CONSTANTARRAY")

    def _group_parameter(self, argument) -> str | None:
        """The value of a kernel parameter that is one per group (``threads_per_threadgroup``, ...), where
        ``argument`` names one alone: an inlined function's parameter bound to it is one value."""
        expression = cursors.unwrapped(argument)
        declared = expression.referenced if cursors.kind(expression) == "DECL_REF_EXPR" else None
        if declared is None or cursors.kind(declared) != "PARM_DECL" or declared.semantic_parent != self.kernel:
            return None
        if any(n == expression.spelling for scope in self.scopes for n, _ in scope):
            return None  # a per-thread copy of a buffer the kernel assigns
        return next((d.split(" = ", 1)[1].rstrip(";") for name, d in self.thread_values
                     if name == expression.spelling and name in self.group_values), None)

    def _qualify(self, body) -> None:
        """Names the body finds in its namespaces, written ``::ns::name`` so that they mean the same
        where the body is inlined."""
        tokens = list(body.get_tokens())
        previous = {token.extent.start.offset: tokens[i - 1].spelling if i else "" for i, token in enumerate(tokens)}
        for node in cursors.walk(body):
            if node.kind.name not in ("DECL_REF_EXPR", "TEMPLATE_REF", "TYPE_REF", "OVERLOADED_DECL_REF", "NAMESPACE_REF"):
                continue
            target = node.referenced
            if target is None or target.semantic_parent is None or target.semantic_parent.kind.name != "NAMESPACE":
                continue
            first = next(node.get_tokens(), None)
            if first is None or first.spelling != target.spelling:
                continue
            if previous.get(first.extent.start.offset, "") in ("::", ".", "->"):
                continue
            edit = (self.src.start(first), self.src.end(first), "::" + _qualified(target))
            if edit not in self.edits:
                self.edits.append(edit)

    def _scoped(self, statements: list, mask: str) -> _Text:
        self.scopes.append([])
        try:
            body = self._block(statements, mask)
            return _ending("{ " + body + " }", body, body.hidden, body)
        finally:
            self.scopes.pop()

    def _declaration(self, statement, uniform: list[tuple[str, str]] | None = None) -> str | None:
        """Group-level declarations (threadgroup memory, ``constexpr``, types) stay once, where they are;
        a variable becomes a per-thread array declared there, and its initialisation the returned
        assignment. A uniform variable (uniform.py) is one value, and its (name, assignment) goes to
        ``uniform``, to run at group level (without ``uniform``, each thread assigns the one value)."""
        children = list(statement.get_children())
        tokens = [t.spelling for t in statement.get_tokens()]
        if any(c.kind.name != "VAR_DECL" for c in children) or "constexpr" in tokens or (
                children and all(c.storage_class is not None and c.storage_class.name == "STATIC"
                                 for c in children)):
            if self._splits(statement):
                raise Unsplittable(f"line {self._line(statement)}: a static declaration with a barrier")
            self.declared.append(self._code(statement))
            self.hoisted += [c.spelling for c in children]
            for variable in children:
                if variable.kind.name == "VAR_DECL" and variable.tls_kind.name != "NONE":
                    self._through_opaque_reference(variable)
            return None
        assignments = []
        for variable in children:
            # Canonical types are fully qualified: an inlined body's types are written in the callee's
            # namespace, and an `auto` deduces sugar such as c10's opmath_t<float>. A template kernel's own
            # types stay as written (their canonical form names no template parameter).
            canonical = variable.type.get_canonical().spelling
            spelled = variable.type.spelling if "type-parameter" in canonical else canonical
            line = self._line(variable)
            if any(word in spelled for word in UNNAMEABLE):
                raise Unsplittable(f"line {line}: variable {variable.spelling} of type {spelled} is live across a "
                                   f"split and its type cannot be named")
            if cursors.kind(variable.type) in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
                raise Unsplittable(f"line {line}: reference {variable.spelling} in a block with a barrier")
            storage = self._fresh("v")
            one = variable.hash in self.uniformity.variables
            if one:
                self.declared.append(self._store(f"std::remove_cv_t<{spelled}> {storage};"))
                self.scopes[-1].append((variable.spelling, storage))
            else:
                self.declared.append(self._store(f"std::remove_cv_t<{spelled}> {storage}[{MAX_THREADS}];"))
                self.scopes[-1].append((variable.spelling, f"{storage}[shimkit_t]"))
            initializer = [c for c in variable.get_children() if c.kind.name not in ("TYPE_REF", "TEMPLATE_REF",
                                                                                     "NAMESPACE_REF")]
            variable_tokens = list(variable.get_tokens())
            equals = next((i for i, t in enumerate(variable_tokens)
                           if t.spelling == "=" and i > 0 and variable_tokens[i - 1].spelling == variable.spelling),
                          None)
            if equals is None:
                if initializer and not cursors.kind(variable.type).endswith("ARRAY"):
                    raise Unsplittable(f"line {line}: {variable.spelling} is initialised directly, not with =")
                continue
            if cursors.kind(variable.type).endswith("ARRAY"):
                raise Unsplittable(f"line {line}: array {variable.spelling} initialised in a block with a barrier")
            start = self.src.start(variable_tokens[equals + 1])
            end = self.src.end(variable)
            value = " ".join(line for line in self._text(start, end).split("\n") if not line.lstrip().startswith("#"))
            if one and uniform is not None:
                uniform.append((variable.spelling, f"{variable.spelling} = {value};"))
            else:
                assignments.append(f"{variable.spelling} = {value};")
        return " ".join(assignments)

    def _through_opaque_reference(self, variable) -> None:
        """Threadgroup memory (the front end's ``static thread_local``) is named in the regions through a
        reference bound once per group to its address, which the optimiser cannot see through: GCC
        otherwise recomputed a thread_local's address at its uses inside the regions' loops, a
        ``__tls_get_addr`` call each in a ``-fPIC`` library (Inductor's row max: 2.45 -> 2.08 ms per 1M
        threads)."""
        reference = self._fresh("g")
        self.declared.append(f"auto& {reference} = *::shimkit_metal::opaque(&{variable.spelling});")
        self.hoisted.append(reference)  # declared where the variable is: what names it stays after it
        for node in cursors.walk(self.body_cursor):
            if cursors.kind(node) == "DECL_REF_EXPR" and node.referenced == variable:
                self.edits.append((self.src.start(node), self.src.end(node), reference))

    def _mask(self, mask: str, value: bool | None) -> tuple[str, str]:
        name = self._fresh("m")
        self.parents[name] = mask
        self.top.append(f"bool {name}[{MAX_THREADS}];")
        fill = f"std::memcpy({name}, {mask}, shimkit_count);" if value is None else f"std::memset({name}, 0, shimkit_count);"
        return name, fill

    def _if(self, statement, mask: str, out: list[str], pending: list[str], flush: Callable[..., None]) -> None:
        children = list(statement.get_children())
        if any(cursors.kind(c) == "DECL_STMT" or cursors.kind(c) == "VAR_DECL" for c in children[:-1]) or \
                len(children) not in (2, 3):
            raise Unsplittable(f"line {self._line(statement)}: if with a declaration and a barrier")
        condition, then = children[0], children[1]
        orelse = children[2] if len(children) == 3 else None
        if not self._splits(condition) and self.uniformity.uniform(condition):
            # every thread takes the same branch: an `if` around the branches' regions, no masks
            flush()
            test = self._group_value(self._code_of_expression(condition))
            branches = f"if ({test}) {{ {self._branch(then, mask)} }}"
            if orelse is not None:
                branches += f" else {{ {self._branch(orelse, mask)} }}"
            out.append(f"if (shimkit_g.any({mask})) {{ {branches} }}")
            return
        taken, fill_taken = self._mask(mask, False)
        other, fill_other = self._mask(mask, False) if orelse is not None else ("", "")
        def set_masks() -> str:
            return (f"{{ const bool shimkit_c = static_cast<bool>({self._code_of_expression(condition)}); "
                    f"{taken}[shimkit_t] = shimkit_c; " + (f"{other}[shimkit_t] = !shimkit_c; " if other else "") + "}")
        # The condition is evaluated with the statements before the if (around its simdgroup call, if it
        # has one), and the first region of the branch taken joins the region that sets the masks.
        splits = self._splits(condition)
        if splits and not self._split_directly(condition, splits, mask, out, pending, flush, set_masks):
            flush()
            out.append(f"{fill_taken} {fill_other} {self._evaluate(mask, condition, set_masks)}")
        else:
            if not splits:
                pending.append(set_masks())
            flush(f"{fill_taken} {fill_other}")
        then_text = self._branch(then, taken)
        first = then_text.first
        joined = self._joined(out[-1], mask, taken, first, lambda: first.fragment) if (
            out and first is not None and first.mask == taken) else None
        if joined is not None:
            out[-1] = joined
            then_text = then_text.without_first()
        parts = [then_text]
        if orelse is not None:
            parts.append(self._branch(orelse, other))
        out.append(" ".join(parts))

    def _branch(self, statement, mask: str) -> _Text:
        if cursors.kind(statement) == "COMPOUND_STMT":
            return self._scoped(list(statement.get_children()), mask)
        return self._scoped([statement], mask)

    def _code_of_expression(self, cursor) -> str:
        text = self._text(self.src.start(cursor), self.src.end(cursor))
        return " ".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))

    def _loop(self, statement, mask: str) -> str:
        kind = statement.kind.name
        line = self._line(statement)
        children = list(statement.get_children())
        init = condition = step = None
        if kind == "FOR_STMT":
            init, condition, step, body = self._for_parts(statement)
        elif kind == "WHILE_STMT":
            if len(children) != 2 or children[0].kind.name in ("DECL_STMT", "VAR_DECL"):
                raise Unsplittable(f"line {line}: while with a declaration and a barrier")
            condition, body = children
        else:
            body, condition = children
        if self._uniform_loop(condition, init, step):
            return self._group_loop(kind, init, condition, step, body, mask)
        running, declare = self._mask(mask, None)
        with self._loop_scope():
            parts = ["{", declare]
            if init is not None:
                if cursors.kind(init) == "DECL_STMT":
                    if self._splits(init):
                        parts.append(self._evaluate(running, init, lambda: self._declaration(init) or ""))
                    else:
                        parts.append(self._region(running, self._declaration(init) or ""))
                else:
                    parts.append(self._evaluate(running, init, lambda: self._code_of_expression(init) + ";"))
                parts[2:2] = self.declared  # the loop variable's storage, before its first region
                self.declared = []
            test = ""
            if condition is not None:
                test = self._evaluate(running, condition, lambda: (
                    f"if (!static_cast<bool>({self._code_of_expression(condition)})) {running}[shimkit_t] = false;"))
            elif any(returned in self.may_return for _, returned in self.inlined):
                # a thread that returned from an inlined function leaves the loop here
                test = self._region(running, ";")
            iteration: list[str] = [self._branch(body, running)]
            if step is not None:
                iteration.append(self._evaluate(running, step, lambda: self._code_of_expression(step) + ";"))
            if kind == "DO_STMT":
                parts.append(f"for (;;) {{ {' '.join(iteration)} {test} if (!shimkit_g.any({running})) break; }}")
            else:
                parts.append(f"for (;;) {{ {test} if (!shimkit_g.any({running})) break; {' '.join(iteration)} }}")
            parts.append("}")
            return " ".join(parts)

    @contextlib.contextmanager
    def _loop_scope(self) -> Iterator[None]:
        """Inside a loop with a split point: its own scope (the init's variables), and jumps checked."""
        self.scopes.append([])
        self.loop_depth += 1
        try:
            yield
        finally:
            self.loop_depth -= 1
            self.scopes.pop()

    def _uniform_loop(self, condition, init, step) -> bool:
        """Whether every thread runs a loop's iterations alike: its condition is uniform, and its init and
        step assign uniform variables (uniform.py)."""
        if condition is None or any(self._splits(p) for p in (condition, init, step) if p is not None) \
                or not self.uniformity.uniform(condition):
            return False
        if init is not None:
            variables = ([c for c in init.get_children()] if cursors.kind(init) == "DECL_STMT"
                         else [written(init)])
            if not all(v is not None and cursors.kind(v) == "VAR_DECL" and v.hash in self.uniformity.variables
                       for v in variables):
                return False
        target = written(step) if step is not None else None
        return step is None or (target is not None and target.hash in self.uniformity.variables)

    def _group_loop(self, kind: str, init, condition, step, body, mask: str) -> str:
        """A loop with a uniform condition: a C++ loop at group level around its body's regions, which run
        under the loop's own mask (every thread of it runs each iteration)."""
        with self._loop_scope():
            parts = ["{"]
            if init is not None:
                if cursors.kind(init) == "DECL_STMT":
                    uniform: list[tuple[str, str]] = []
                    self._declaration(init, uniform)
                    parts += self.declared
                    self.declared = []
                    parts += [self._group_statement(mask, code) for _, code in uniform]
                else:
                    parts.append(self._group_statement(mask, self._code_of_expression(init) + ";"))
            test = f"shimkit_g.any({mask}) && {self._group_value(self._code_of_expression(condition))}"
            iteration: list[str] = [self._branch(body, mask)]
            if step is not None:
                iteration.append(self._group_statement(mask, self._code_of_expression(step) + ";"))
            if kind == "DO_STMT":
                parts.append(f"do {{ {' '.join(iteration)} }} while ({test});")
            else:
                parts.append(f"while ({test}) {{ {' '.join(iteration)} }}")
            parts.append("}")
            return " ".join(parts)

    def _for_parts(self, statement):
        """init, condition, step and body of a for statement."""
        parts = cursors.for_parts(statement)
        if parts is None:
            raise Unsplittable(f"line {self._line(statement)}: a range-based for with a barrier")
        if parts[1] is not None and cursors.kind(parts[1]) in ("DECL_STMT", "VAR_DECL"):
            raise Unsplittable(f"line {self._line(statement)}: a for condition that declares")
        return parts

def _nameable(type_) -> str | None:
    """A callee's parameter or result type as C++ that names it where the call is (its canonical form),
    or None where it depends on the callee's template parameters."""
    spelled = type_.get_canonical().spelling
    if any(word in spelled for word in ("type-parameter", *UNNAMEABLE)):
        return None
    return spelled


class _Region(str):
    """A region's text: its threads' loop under ``mask``, running ``fragment`` for each."""

    mask: str
    fragment: str

    def __new__(cls, mask: str, fragment: str):
        text = super().__new__(cls, f"shimkit_g.region({mask}, [&](unsigned shimkit_t) __attribute__((always_inline)) -> bool "
                                    f"{{ {fragment} return true; }});")
        text.mask, text.fragment = mask, fragment
        return text


class _Out(list):
    """A block's group-level code, piece by piece, without empty pieces (a region joins the one before
    it only where nothing stands between them)."""

    def append(self, text: str) -> None:
        if text.strip():
            super().append(text)


class _Carried(str):
    """One thread's code from a caller, bound to its names, to run first in a callee's first region."""


class _Text(str):
    """Group-level code; ``last`` is the region it ends with, followed by nothing but the ends of blocks
    (or None), and ``hidden`` the names those blocks declare; ``first`` the region it starts with, after
    nothing but the openings of blocks (or None)."""

    last: _Region | None
    hidden: set[str]
    first: _Region | None

    def __new__(cls, text: str, last: _Region | None, hidden: set[str], first: _Region | None = None):
        out = super().__new__(cls, text)
        out.last, out.hidden, out.first = last, hidden, first
        return out

    def map(self, edit: Callable[[str], str]) -> _Text:
        def region(r: _Region | None) -> _Region | None:
            return _Region(edit(r.mask), edit(r.fragment)) if r is not None else None
        return _Text(edit(self), region(self.last), self.hidden, region(self.first))

    def without_first(self) -> _Text:
        """The text with its first region taken out (it runs joined to the region before)."""
        assert self.first is not None
        at = self.index(self.first)
        return _Text(self[:at] + self[at + len(self.first):], None if self.last is self.first else self.last,
                     self.hidden)


def _ending(text: str, tail, hidden: set[str], head=None) -> _Text:
    """``text`` as _Text, where ``tail`` is the code it ends with (before the ends of its blocks) and
    ``head`` the code it starts with (after the openings of its blocks)."""
    first = head if isinstance(head, _Region) else head.first if isinstance(head, _Text) else None
    if first is not None and text[:text.index(first)].strip(" {"):
        first = None
    if isinstance(tail, _Region):
        return _Text(text, tail, hidden, first)
    if isinstance(tail, _Text) and tail.last is not None:
        return _Text(text, tail.last, hidden | tail.hidden, first)
    return _Text(text, None, hidden, first)




def _arithmetic(type_) -> bool:
    return cursors.kind(type_) in ARITHMETIC or type_.spelling == "_Float16"


def _speculable(expression) -> bool:
    """An expression any thread may evaluate, whatever its values: variables, literals and conversions to
    floating point (no memory read through a pointer, no call, no operator that can trap or overflow)."""
    for node in [expression, *cursors.walk(expression)]:
        kind = cursors.kind(node)
        if kind in ("DECL_REF_EXPR", "INTEGER_LITERAL", "FLOATING_LITERAL", "CXX_BOOL_LITERAL_EXPR",
                    "TYPE_REF", "NAMESPACE_REF", "TEMPLATE_REF", "PAREN_EXPR"):
            continue
        if kind == "UNEXPOSED_EXPR" or kind in cursors.CASTS:
            inner = cursors.operands(node)
            same = len(inner) == 1 and inner[0].type.get_canonical().spelling == node.type.get_canonical().spelling
            if same or cursors.kind(node.type.get_canonical()) in ("FLOAT", "DOUBLE") or \
                    node.type.get_canonical().spelling == "_Float16":
                continue
        return False
    return True


def _returns_in_loop(body) -> bool:
    """Whether a function body returns from inside a loop (outside lambdas)."""
    def visit(node, in_loop: bool) -> bool:
        for child in node.get_children():
            kind = cursors.kind(child)
            if kind == "LAMBDA_EXPR":
                continue
            if (kind == "RETURN_STMT" and in_loop) or visit(child, in_loop or kind in LOOPS):
                return True
        return False
    return visit(body, False)


def _msl_line(source: bytes, offset: int) -> int:
    """The MSL line of an offset in the translated source, through the preprocessor's line markers."""
    before = source[:offset]
    marker = None
    for marker in LINE_MARKER.finditer(before):
        pass
    if marker is None:
        return before.count(b"\n")
    return int(marker.group(1)) + before.count(b"\n", marker.end())


def _inside(inner, outer) -> bool:
    return (outer.extent.start.offset <= inner.extent.start.offset
            and inner.extent.end.offset <= outer.extent.end.offset)

