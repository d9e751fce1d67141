"""MSL source → C++ for the host compiler: the small front end of ``shimkit.metal``.

MSL is C++14 with address spaces, attributes and a standard library, so most of a kernel compiles as C++
once shimkit's ``metal_stdlib`` (``metal/include``) stands in for Apple's. The front end does what the
headers cannot, keeping every line where it was so compiler messages point at the MSL line:

* pastes ``#include <c10/metal/...>`` from the headers torch ships (as ``torch.mps.compile_shader`` does)
  and drops Metal's own ``<metal_*>`` includes;
* reads each kernel's parameters and their attributes (``[[buffer(n)]]``, ``[[thread_position_in_grid]]``,
  ...), and the ``[[host_name("...")]]`` names of template instantiations, then removes the attributes;
* turns ``threadgroup`` variable declarations in a kernel into storage shared by one threadgroup;
* rewrites multi-component swizzles (``v.xy``, ``v.zyx``) and ``half`` literals (``1.0h``);
* finds which kernels can reach a barrier or a simdgroup function (they run as cooperative fibers);
* refuses what it does not emulate (textures, samplers, simdgroup matrices, Metal 4 tensors, ...) with the
  construct and its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# Attributes that bind a kernel parameter to a thread coordinate; the value is the runtime's field.
POSITION_ATTRIBUTES = {
    "thread_position_in_grid": "grid",
    "thread_position_in_threadgroup": "in_group",
    "threadgroup_position_in_grid": "group",
    "threads_per_threadgroup": "group_size",
    "threads_per_grid": "grid_size",
    "threadgroups_per_grid": "groups",
}
INDEX_ATTRIBUTES = {
    "thread_index_in_threadgroup": "index_in_group",
    "thread_index_in_simdgroup": "lane",
    "simdgroup_index_in_threadgroup": "simd_index",
    "simdgroups_per_threadgroup": "simds_per_group",
    "thread_execution_width": None,
    "threads_per_simdgroup": None,
}
SYNC_FUNCTIONS = re.compile(r"^(threadgroup_barrier|simdgroup_barrier|simd_\w+|quad_\w+)$")
UNSUPPORTED = [
    (re.compile(r"\b(texture[123]d(_array)?|texturecube(_array)?|texture2d_ms|depth[23]d\w*|texture_buffer)\s*<"),
     "textures"),
    (re.compile(r"\bsampler\b"), "samplers"),
    (re.compile(r"\bsimdgroup_(float|half|bfloat)\d+x\d+\b|\bsimdgroup_matrix\b|\bsimdgroup_multiply"),
     "simdgroup matrices"),
    (re.compile(r"\btensor\s*<|\bmpp::|<metal_tensor>"), "Metal 4 tensors"),
    (re.compile(r"\bimageblock\b|\[\[\s*(stage_in|vertex_id|position|color)"), "render-pipeline features"),
    (re.compile(r"\b(vertex|fragment|mesh|object)\s+\w+\s+\w+\s*\("), "non-compute shader functions"),
    (re.compile(r"\[\[\s*threadgroup\s*\(\s*\d+\s*\)\s*\]\]"),
     "threadgroup buffer arguments (torch.mps.compile_shader cannot size them either)"),
    (re.compile(r"\b(visible|intersection|stitchable)\b\s+\w"), "visible/intersection/stitchable functions"),
]
METAL_HEADERS = re.compile(r"^\s*#\s*include\s*<(metal_\w+)>\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
# `constant` and `const` in one declaration, maybe with `constexpr`/`static` between: kept as `constant` and those.
DOUBLE_CONST = re.compile(r"\bconstant((?:\s+(?:constexpr|static))*)\s+const\b"
                          r"|\bconst((?:\s+(?:constexpr|static))*)\s+constant\b")
HALF_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH]\b")
SWIZZLE = re.compile(r"\.([xyzw]{2,4}|[rgba]{2,4})\b(?!\s*\()")
SWIZZLE_INDEX = {c: i for i, c in enumerate("xyzw")} | {c: i for i, c in enumerate("rgba")}
IDENTIFIER_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;(){}]*?>)?\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "static_cast", "reinterpret_cast",
            "const_cast", "decltype", "alignof", "catch", "static_assert", "noexcept", "operator"}


class MetalSourceError(ValueError):
    """The MSL source uses something shimkit.metal does not run, or cannot be read; names the line."""


@dataclass
class Parameter:
    text: str
    kind: str            # "buffer", "position", "index", "constant"
    binding: str | int   # buffer index, or the runtime field


@dataclass
class KernelInfo:
    name: str                      # the name callers use (host_name for template instantiations)
    function: str                  # the C++ expression naming the function: f or f<float>
    parameters: list[Parameter]
    buffers: int
    cooperative: bool
    max_threads: int | None
    measures_threadgroup: bool = False   # whether it declares threadgroup memory (measured by one dry call)
    split: str | None = None             # its group function (metal/loops/), if it was split at its barriers
    fibers_because: str | None = None    # why a cooperative kernel was not split


@dataclass
class Translation:
    """The C++ of an MSL source and what each kernel takes. Each kernel's exported launcher stands where
    the kernel is defined or instantiated; :meth:`cpp_for` leaves out the launchers of kernels not asked
    for, so that a library of many template instantiations compiles only those it uses."""

    text: str  # the C++ with a LAUNCHER_MARK comment where each kernel's launcher goes
    kernels: dict[str, KernelInfo]
    launchers: list[str]

    @property
    def cpp(self) -> str:
        return self.cpp_for(None)

    def cpp_for(self, names: Iterable[str] | None) -> str:
        """The C++ with the launchers of ``names`` (every kernel for ``None``) and no others."""
        wanted = None if names is None else {list(self.kernels).index(name) for name in names}
        return LAUNCHER_MARK.sub(lambda m: self.launchers[int(m.group(1))]
                                 if wanted is None or int(m.group(1)) in wanted else "", self.text)


LAUNCHER_MARK = re.compile(r"/\*shimkit-launcher:(\d+)\*/")


def blank_comments(text: str) -> str:
    """``text`` with comments and string/char literals' contents blanked, newlines kept: for parsing."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def matching(text: str, start: int, opening: str, closing: str) -> int:
    """Index just past the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    raise MetalSourceError(f"line {line_of(text, start)}: unbalanced '{opening}'")


def split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def embed_headers(source: str, include_root: Path, seen: set[str] | None = None, name: str = "<msl>") -> str:
    """Pastes each ``#include`` found under ``include_root`` (torch's headers, as ``torch.mps.compile_shader``
    resolves them: ``<c10/metal/...>``, ``<ATen/native/mps/kernels/...>``), once each and recursively, with
    ``#line`` markers so messages keep their file and line; Metal's own headers are dropped (shimkit's
    stand in)."""
    seen = set() if seen is None else seen
    lines = source.split("\n")
    out = []
    for number, line in enumerate(lines, 1):
        if METAL_HEADERS.match(line):
            out.append("")
            continue
        include = INCLUDE.match(line)
        if include is None:
            out.append(line)
            continue
        target = include.group(1)
        path = include_root / target
        if not path.is_file():
            # An #error rather than a Python error: the line may sit in a branch the preprocessor drops
            # (c10's headers include <array> when not compiled as Metal).
            out.append(f'#error "#include <{target}> is not available to shimkit.metal (it provides '
                       f'<metal_stdlib> and the headers under torch/include)"')
            continue
        if target in seen:
            out.append("")
            continue
        seen.add(target)
        pasted = embed_headers(path.read_text(), include_root, seen, target)
        out.append(f'#line 1 "{target}"\n{pasted}\n#line {number + 1} "{name}"')
    text = "\n".join(out)
    return f'#line 1 "{name}"\n{text}' if name == "<msl>" else text


def check_supported(source: str) -> None:
    """Refuses what shimkit.metal does not emulate, naming the construct and its line (in ``source``,
    the MSL as written: before the preprocessor, which would drop a ``<metal_tensor>`` include)."""
    parsed = blank_comments(source)
    for pattern, construct in UNSUPPORTED:
        found = pattern.search(parsed)
        if found:
            raise MetalSourceError(f"<msl>:{line_of(parsed, found.start())}: {construct} are not supported by "
                                   f"shimkit.metal (found {found.group(0).strip()!r})")


def _swizzle(match: re.Match) -> str:
    indices = ",".join(str(SWIZZLE_INDEX[c]) for c in match.group(1))
    return f".template sw<{indices}>()"


def function_bodies(parsed: str) -> dict[str, list[str]]:
    """Every function definition's body text, by function name (overloads merged)."""
    bodies: dict[str, list[str]] = {}
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:<[^;(){}]*?>)?\s*\(", parsed):
        name = match.group(1)
        if name in KEYWORDS:
            continue
        try:
            close = matching(parsed, match.end() - 1, "(", ")")
        except MetalSourceError:
            continue
        rest = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[^{;]+)?\{", parsed[close:])
        if rest is None:
            continue
        body_start = close + rest.end() - 1
        body_end = matching(parsed, body_start, "{", "}")
        bodies.setdefault(name, []).append(parsed[body_start:body_end])
    return bodies


def reaches_sync(name: str, bodies: dict[str, list[str]], cache: dict[str, bool]) -> bool:
    if name in cache:
        return cache[name]
    cache[name] = False  # recursion guard
    for body in bodies.get(name, []):
        for call in IDENTIFIER_CALL.finditer(body):
            callee = call.group(1)
            if SYNC_FUNCTIONS.match(callee) or (callee != name and reaches_sync(callee, bodies, cache)):
                cache[name] = True
                return True
    return False


KERNEL = re.compile(r"(?P<attrs>(?:\[\[[^\]]*\]\]\s*)*)\bkernel\s+void\s+"
                    r"(?P<name>(?:::\s*)?(?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)\s*(?P<targs><[^;(){}]*?>)?\s*\(")
DECLTYPE_INSTANTIATION = re.compile(r"\bkernel\s+decltype\s*\(\s*(?P<function>[A-Za-z_][\w:]*)\s*(?P<targs><[^;()]*>)"
                                    r"\s*\)\s*(?P=function)\s*<[^;()]*>\s*;")
TEMPLATE_HEADER = re.compile(r"template\s*<[^;{}]*>\s*$")
LINE_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"', re.M)


def location(text: str, offset: int) -> str:
    """``file:line`` of ``offset`` in preprocessed text, read from the preprocessor's line markers."""
    marker = None
    for marker in LINE_MARKER.finditer(text, 0, offset):
        pass
    if marker is None:
        return f"<msl>:{line_of(text, offset)}"
    return f"{marker.group(2)}:{int(marker.group(1)) + text.count(chr(10), marker.end(), offset) - 1}"


def translate(text: str) -> Translation:
    """The C++ for preprocessed MSL ``text`` (without shimkit's prelude), and what each kernel takes.

    The text comes from the C preprocessor, so kernels that macros declare or instantiate are visible;
    its line markers keep messages pointing at the MSL line. Each kernel's exported launcher is written
    where the kernel is defined (or instantiated), on the same line, so it sees the same names."""
    text = re.sub(r"\[\[\s*kernel\s*\]\]", "kernel", text)  # the attribute spelling of the keyword
    # `kernel decltype(f<T>) f<T>;` (MLX's instantiation) is the same instantiation as `kernel void f<T>(...);`.
    text = DECLTYPE_INSTANTIATION.sub(lambda m: f"kernel void {m['function']}{m['targs']}();"
                                      + "\n" * m.group(0).count("\n"), text)
    parsed = blank_comments(text)
    edits: list[tuple[int, int, str]] = []
    definitions: dict[str, dict] = {}
    kernels: dict[str, KernelInfo] = {}
    bodies = function_bodies(parsed)
    sync_cache: dict[str, bool] = {}

    for match in KERNEL.finditer(parsed):
        qualified = re.sub(r"\s+", "", match.group("name"))
        name = qualified.rsplit("::", 1)[-1]
        where = location(text, match.start())
        open_paren = match.end() - 1
        close = matching(parsed, open_paren, "(", ")")
        after = parsed[close:].lstrip()
        prefix = parsed[:match.start()]
        template = TEMPLATE_HEADER.search(prefix.rstrip() + "\n") if prefix.rstrip().endswith(">") else None
        instantiation = re.search(r"\btemplate\s*$", prefix)
        max_threads = re.search(r"max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)", match.group("attrs"))
        if instantiation is not None and after.startswith(";"):
            host = re.search(r'host_name\s*\(((?:\s*"[^"]*")+)\s*\)', text[instantiation.start():match.end()])
            if host is None:
                raise MetalSourceError(f"{where}: explicit instantiation of kernel {name} has no "
                                       f"[[host_name(\"...\")]]")
            host_name = "".join(re.findall(r'"([^"]*)"', host.group(1)))
            definition = definitions.get(name)
            if definition is None:
                raise MetalSourceError(f"{where}: kernel template {name} instantiated as {host_name!r} is not "
                                       f"defined before it")
            targs = re.sub(r"\s+", " ", text[match.start("targs"):match.end("targs")]) if match.group("targs") else ""
            scope = qualified[:-len(name)]  # "" or "::c10::metal::": the launcher sits where the instantiation was
            kernel = _kernel(host_name, f"{scope}{name}{targs}", definition, max_threads)
            _add(kernels, kernel, where)
            end = parsed.index(";", close) + 1
            edits.append((instantiation.start(), end, _blank(text[instantiation.start():end],
                                                              _launcher_mark(len(kernels) - 1))))
            continue
        # `[[attrs]] kernel void f(` -> `static void f(`, attributes inside the parameter list blanked.
        edits.append((match.start(), match.start("name"), _blank(text[match.start():match.start("name")],
                                                                 "static void ")))
        for attribute in re.finditer(r"\[\[[^\]]*\]\]", parsed[open_paren:close]):
            a, b = open_paren + attribute.start(), open_paren + attribute.end()
            edits.append((a, b, " " * (b - a)))
        if after.startswith(";"):
            continue  # a declaration; the definition follows
        if not after.startswith("{"):
            raise MetalSourceError(f"{where}: cannot read kernel {name}")
        body_start = close + (len(parsed[close:]) - len(after))
        body_end = matching(parsed, body_start, "{", "}")
        declarations = list(re.finditer(
            r"\bthreadgroup\s+([A-Za-z_][\w:<>, ]*?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*);",
            parsed[body_start:body_end]))
        for number, decl in enumerate(declarations, 1):
            start, end = body_start + decl.start(), body_start + decl.end()
            edits.append((start, start + len("threadgroup"), "static thread_local"))
            # Threadgroup memory is measured where it is declared (its size may use the kernel's own
            # constants) by one dry call of the kernel, which returns after the last declaration.
            measure = f" if (::shimkit_metal::measuring) {{ ::shimkit_metal::measured += (sizeof({decl.group(2)}) + 15) / 16 * 16;"
            measure += " return; }" if number == len(declarations) else " }"
            edits.append((end, end, measure))
        header = template.group(0).strip() if template else ""
        definition = dict(parameters=_parameters(name, parsed[open_paren + 1:close - 1], where),
                          max_threads=max_threads, measures=bool(declarations),
                          cooperative=reaches_sync(name, bodies, sync_cache) or any(
                              SYNC_FUNCTIONS.match(c.group(1)) for c in
                              IDENTIFIER_CALL.finditer(parsed[body_start:body_end])))
        definitions[name] = definition
        if not header:
            kernel = _kernel(name, name, definition, max_threads)
            _add(kernels, kernel, where)
            edits.append((body_end, body_end, " " + _launcher_mark(len(kernels) - 1)))

    for a, b, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:a] + replacement + text[b:]
    text = HALF_LITERAL.sub(lambda m: f"half({m.group(1)}f)" if "." in m.group(1) or "e" in m.group(1).lower()
                            else f"half({m.group(1)}.0f)", text)
    text = SWIZZLE.sub(_swizzle, text)
    # `constant` becomes `const`, so `constant const T*` (c10's error.h) and `constant constexpr const int`
    # (ExecuTorch's op_gather_qmv.mm) would repeat the qualifier, which g++ refuses (Apple's clang warns).
    text = DOUBLE_CONST.sub(lambda m: f"constant{m.group(1) or m.group(2) or ''}", text)
    errors = "SHIMKIT_EXPORT const char* shimkit_last_error() { return ::shimkit_metal::last_error.c_str(); }"
    return Translation(text=f"{text}\n{errors}\n", kernels=kernels,
                       launchers=[launcher(kernel, index) for index, kernel in enumerate(kernels.values())])


def _launcher_mark(index: int) -> str:
    return f"/*shimkit-launcher:{index}*/"


def _add(kernels: dict[str, KernelInfo], kernel: KernelInfo, where: str) -> None:
    if kernel.name in kernels:
        raise MetalSourceError(f"{where}: two kernels are named {kernel.name!r}")
    kernels[kernel.name] = kernel


def _blank(original: str, replacement: str = "") -> str:
    """``replacement`` padded to keep ``original``'s newlines, so later lines keep their numbers."""
    return replacement + "\n" * original.count("\n")


def _parameters(kernel: str, params_text: str, where: str) -> list[Parameter]:
    parameters: list[Parameter] = []
    used: set[int] = set()
    pending = []
    for raw in split_top_level(params_text):
        attributes = re.findall(r"\[\[\s*([^\]]*?)\s*\]\]", raw)
        declaration = re.sub(r"\[\[[^\]]*\]\]", "", raw).strip()
        binding: str | int | None = None
        kind = "buffer"
        for attribute in attributes:
            buffer = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", attribute)
            if buffer:
                binding = int(buffer.group(1))
            elif attribute in POSITION_ATTRIBUTES:
                kind, binding = "position", POSITION_ATTRIBUTES[attribute]
            elif attribute in INDEX_ATTRIBUTES:
                field_name = INDEX_ATTRIBUTES[attribute]
                kind, binding = ("constant", "32") if field_name is None else ("index", field_name)
            else:
                raise MetalSourceError(f"{where}: kernel {kernel}: parameter "
                                       f"{declaration!r} has attribute [[{attribute}]], which shimkit.metal "
                                       f"does not support")
        if kind == "buffer" and not re.search(r"[*&]", declaration):
            raise MetalSourceError(f"{where}: kernel {kernel}: parameter {declaration!r} "
                                   f"is neither a buffer (pointer or reference) nor bound to a thread attribute")
        parameter = Parameter(declaration, kind, binding if binding is not None else -1)
        if kind == "buffer":
            if binding is None:
                pending.append(parameter)
            elif binding in used:
                raise MetalSourceError(f"{where}: kernel {kernel}: two parameters use "
                                       f"[[buffer({binding})]]")
            else:
                used.add(int(binding))
        parameters.append(parameter)
    index = 0
    for parameter in pending:  # unnumbered buffers take the lowest free indices, in order
        while index in used:
            index += 1
        parameter.binding = index
        used.add(index)
    if used and sorted(used) != list(range(len(used))):
        raise MetalSourceError(f"kernel {kernel}: buffer indices {sorted(used)} leave gaps; shimkit.metal binds "
                               f"arguments to buffers 0..n-1 in order, as torch.mps.compile_shader does")
    return parameters


def _kernel(name: str, function: str, definition: dict, max_threads) -> KernelInfo:
    limit = max_threads or definition["max_threads"]
    buffers = sum(1 for p in definition["parameters"] if p.kind == "buffer")
    return KernelInfo(name=name, function=function, parameters=definition["parameters"], buffers=buffers,
                      cooperative=definition["cooperative"], max_threads=int(limit.group(1)) if limit else None,
                      measures_threadgroup=definition["measures"])


def launcher(kernel: KernelInfo, index: int) -> str:
    """The exported entry points of one kernel, on one line: its launcher and its threadgroup memory size."""
    arguments = []
    for position, parameter in enumerate(kernel.parameters):
        param = f"::shimkit_metal::param_t<F, {position}>"
        if parameter.kind == "buffer":
            arguments.append(f"::shimkit_metal::from_buffer<{param}>(args[{parameter.binding}])")
        elif parameter.kind == "position":
            arguments.append(f"::shimkit_metal::from_position<{param}>(t.{parameter.binding})")
        elif parameter.kind == "index":
            arguments.append(f"::shimkit_metal::from_index<{param}>(t.{parameter.binding})")
        else:
            arguments.append(f"::shimkit_metal::from_index<{param}>({parameter.binding})")
    if kernel.split:
        buffers = [a for a, p in zip(arguments, kernel.parameters) if p.kind == "buffer"]
        run = (f"::shimkit_metal::launch<::shimkit_metal::Execution::kSplit>(*d, [&](const ::shimkit_metal::ThreadInfo& "
               f"base, ::shimkit_metal::uint count) {{ {kernel.split}({', '.join([*buffers, 'base', 'count'])}); }})")
    elif kernel.cooperative:
        run = (f"::shimkit_metal::launch<::shimkit_metal::Execution::kFibers>(*d, [&](const ::shimkit_metal::ThreadInfo& t) "
               f"{{ F({', '.join(arguments)}); }})")
    else:
        # A row of threads as one loop over locals: buffers bound once (a store through a kernel's pointer
        # cannot be taken to change them), and the threads of a barrier-free kernel are independent (in
        # Metal, one thread's access to what another writes is a race), which `omp simd` tells the compiler.
        bound = "".join(f"decltype(auto) b{position} = {argument}; "
                        for position, (argument, parameter) in enumerate(zip(arguments, kernel.parameters))
                        if parameter.kind == "buffer")
        per_thread = [f"b{position}" if parameter.kind == "buffer" else argument
                      for position, (argument, parameter) in enumerate(zip(arguments, kernel.parameters))]
        run = (f"::shimkit_metal::launch<::shimkit_metal::Execution::kRows>(*d, [&](const ::shimkit_metal::ThreadInfo& row, "
               f"::shimkit_metal::uint count) {{ {bound}const ::shimkit_metal::uint end = row.grid[0] + count; "
               f"_Pragma(\"omp simd\") for (::shimkit_metal::uint x = row.grid[0]; x < end; ++x) "
               f"{{ const ::shimkit_metal::ThreadInfo t = ::shimkit_metal::in_row(row, x); F({', '.join(per_thread)}); }} }})")
    return (f"SHIMKIT_EXPORT int shimkit_launch_{index}(void** args, const ::shimkit_metal::Dispatch* d) {{ "
            f"constexpr auto F = &{kernel.function}; "
            f"return {run}; }} "
            f"SHIMKIT_EXPORT unsigned long shimkit_tg_{index}() {{ "
            + (f"constexpr auto F = &{kernel.function}; "
               f"return ::shimkit_metal::measure_threadgroup([] {{ alignas(64) static char zeros[4096] = {{}}; "
               f"void* args[{max(1, kernel.buffers)}]; for (auto& a : args) a = zeros; "
               f"::shimkit_metal::ThreadInfo t{{}}; (void)t; F({', '.join(arguments)}); }}); }}"
               if kernel.measures_threadgroup else "return 0; }"))
