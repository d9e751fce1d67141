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
from dataclasses import dataclass, field
from pathlib import Path

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
    threadgroup_sizes: list[str] = field(default_factory=list)   # sizeof expressions
    template_header: str = ""
    template_arguments: str = ""


@dataclass
class Translation:
    cpp: str
    kernels: dict[str, KernelInfo]


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
    """Pastes ``#include <c10/metal/...>`` (once each, recursively), with ``#line`` markers so messages
    keep their file and line; Metal's own headers are dropped (shimkit's stand in)."""
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
        if not target.startswith("c10/metal/") or not path.is_file():
            raise MetalSourceError(f"{name}:{number}: #include <{target}> is not available to shimkit.metal "
                                   f"(it provides <metal_stdlib> and torch's <c10/metal/...> headers)")
        if target in seen:
            out.append("")
            continue
        seen.add(target)
        pasted = embed_headers(path.read_text(), include_root, seen, target)
        out.append(f'#line 1 "{target}"\n{pasted}\n#line {number + 1} "{name}"')
    return "\n".join(out)


def check_supported(parsed: str) -> None:
    for pattern, construct in UNSUPPORTED:
        found = pattern.search(parsed)
        if found:
            raise MetalSourceError(f"line {line_of(parsed, found.start())}: {construct} are not supported by "
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


KERNEL = re.compile(r"(?P<attrs>(?:\[\[[^\]]*\]\]\s*)*)\bkernel\s+void\s+(?P<name>[A-Za-z_]\w*)\s*(?P<targs><[^;(){}]*?>)?\s*\(")
TEMPLATE_HEADER = re.compile(r"template\s*<[^;{}]*>\s*$")


def translate(source: str, include_root: Path) -> Translation:
    """The C++ for ``source`` (without shimkit's prelude), and what each kernel takes."""
    text = embed_headers(source, include_root)
    parsed = blank_comments(text)
    check_supported(parsed)
    edits: list[tuple[int, int, str]] = []
    definitions: dict[str, dict] = {}
    kernels: dict[str, KernelInfo] = {}
    bodies = function_bodies(parsed)
    sync_cache: dict[str, bool] = {}

    for match in KERNEL.finditer(parsed):
        name = match.group("name")
        open_paren = match.end() - 1
        close = matching(parsed, open_paren, "(", ")")
        params_text = parsed[open_paren + 1:close - 1]
        after = parsed[close:].lstrip()
        prefix = parsed[:match.start()]
        template = TEMPLATE_HEADER.search(prefix.rstrip() + "\n") if prefix.rstrip().endswith(">") else None
        instantiation = re.search(r"\btemplate\s*$", prefix)
        max_threads = re.search(r"max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)", match.group("attrs"))
        if instantiation is not None and after.startswith(";"):
            host = re.search(r'host_name\s*\(\s*"', text[instantiation.start():match.end()])
            if host is None:
                raise MetalSourceError(f"line {line_of(parsed, match.start())}: explicit instantiation of "
                                       f"kernel {name} has no [[host_name(\"...\")]]")
            host_start = instantiation.start() + host.end()
            host_name = text[host_start:text.index('"', host_start)]
            end = parsed.index(";", close) + 1
            edits.append((instantiation.start(), end, _blank(text[instantiation.start():end])))
            definitions.setdefault("instances", []).append(
                (host_name, name, (match.group("targs") or "").strip(), max_threads))
            continue
        if not after.startswith("{"):
            raise MetalSourceError(f"line {line_of(parsed, match.start())}: kernel {name} is declared but not defined")
        body_start = close + (len(parsed[close:]) - len(after))
        body_end = matching(parsed, body_start, "{", "}")
        parameters = _parameters(name, params_text, parsed, open_paren)
        threadgroup_sizes = []
        for decl in re.finditer(r"\bthreadgroup\s+([A-Za-z_][\w:<>, ]*?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*);",
                                parsed[body_start:body_end]):
            start = body_start + decl.start()
            edits.append((start, start + len("threadgroup"), "static thread_local"))
            threadgroup_sizes.append(f"sizeof({decl.group(1)}{decl.group(3).replace(' ', '')})")
        header = template.group(0).strip() if template else ""
        definitions[name] = dict(parameters=parameters, max_threads=max_threads, template=header,
                                 cooperative=reaches_sync(name, bodies, sync_cache) or
                                 any(SYNC_FUNCTIONS.match(c.group(1)) for c in
                                     IDENTIFIER_CALL.finditer(parsed[body_start:body_end])),
                                 threadgroup_sizes=threadgroup_sizes)
        # `[[attrs]] kernel void f(` -> `static void f(`, attributes inside the parameter list blanked.
        edits.append((match.start(), match.start("name"), _blank(text[match.start():match.start("name")],
                                                                 "static void ")))
        for attribute in re.finditer(r"\[\[[^\]]*\]\]", parsed[open_paren:close]):
            a, b = open_paren + attribute.start(), open_paren + attribute.end()
            edits.append((a, b, " " * (b - a)))
        if not header:
            kernels[name] = _kernel(name, name, definitions[name], max_threads, "")

    for host_name, name, targs, max_threads in definitions.pop("instances", []):
        definition = definitions.get(name)
        if definition is None:
            raise MetalSourceError(f"kernel template {name} instantiated as {host_name!r} is not defined")
        kernels[host_name] = _kernel(host_name, f"{name}{targs}", definition, max_threads, targs)

    for a, b, replacement in sorted(edits, reverse=True):
        text = text[:a] + replacement + text[b:]
    text = HALF_LITERAL.sub(lambda m: f"half({m.group(1)}f)" if "." in m.group(1) or "e" in m.group(1).lower()
                            else f"half({m.group(1)}.0f)", text)
    text = SWIZZLE.sub(_swizzle, text)
    return Translation(cpp=f'#line 1 "<msl>"\n{text}\n', kernels=kernels)


def _blank(original: str, replacement: str = "") -> str:
    """``replacement`` padded to keep ``original``'s newlines, so later lines keep their numbers."""
    return replacement + "\n" * original.count("\n")


def _parameters(kernel: str, params_text: str, parsed: str, offset: int) -> list[Parameter]:
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
                raise MetalSourceError(f"line {line_of(parsed, offset)}: kernel {kernel}: parameter "
                                       f"{declaration!r} has attribute [[{attribute}]], which shimkit.metal "
                                       f"does not support")
        if kind == "buffer" and not re.search(r"[*&]", declaration):
            raise MetalSourceError(f"line {line_of(parsed, offset)}: kernel {kernel}: parameter {declaration!r} "
                                   f"is neither a buffer (pointer or reference) nor bound to a thread attribute")
        parameter = Parameter(declaration, kind, binding if binding is not None else -1)
        if kind == "buffer":
            if binding is None:
                pending.append(parameter)
            elif binding in used:
                raise MetalSourceError(f"line {line_of(parsed, offset)}: kernel {kernel}: two parameters use "
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


def _kernel(name: str, function: str, definition: dict, max_threads, targs: str) -> KernelInfo:
    limit = max_threads or definition["max_threads"]
    buffers = sum(1 for p in definition["parameters"] if p.kind == "buffer")
    return KernelInfo(name=name, function=function, parameters=definition["parameters"], buffers=buffers,
                      cooperative=definition["cooperative"], max_threads=int(limit.group(1)) if limit else None,
                      threadgroup_sizes=definition["threadgroup_sizes"], template_header=definition["template"],
                      template_arguments=targs)


def launchers(translation: Translation) -> str:
    """The exported C entry points: per kernel, a launcher and its threadgroup memory size."""
    out = ["\n#line 1 \"<shimkit launchers>\""]
    for index, kernel in enumerate(translation.kernels.values()):
        arguments = []
        for position, parameter in enumerate(kernel.parameters):
            param = f"shimkit_metal::param_t<F, {position}>"
            if parameter.kind == "buffer":
                arguments.append(f"shimkit_metal::from_buffer<{param}>(args[{parameter.binding}])")
            elif parameter.kind == "position":
                arguments.append(f"shimkit_metal::from_position<{param}>(t.{parameter.binding})")
            elif parameter.kind == "index":
                arguments.append(f"shimkit_metal::from_index<{param}>(t.{parameter.binding})")
            else:
                arguments.append(f"shimkit_metal::from_index<{param}>({parameter.binding})")
        cooperative = "true" if kernel.cooperative else "false"
        out.append(
            f"SHIMKIT_EXPORT int shimkit_launch_{index}(void** args, const shimkit_metal::Dispatch* d) {{\n"
            f"  constexpr auto F = &{kernel.function};\n"
            f"  return shimkit_metal::launch(*d, {cooperative}, [&](const shimkit_metal::ThreadInfo& t) "
            f"{{ F({', '.join(arguments)}); }});\n}}")
        sizes = " + ".join(f"(({s} + 15) / 16 * 16)" for s in kernel.threadgroup_sizes) or "0"
        if kernel.template_header:
            out.append(f"{kernel.template_header} unsigned long shimkit_tg_{index}_of() {{ return {sizes}; }}")
            out.append(f"SHIMKIT_EXPORT unsigned long shimkit_tg_{index}() {{ return shimkit_tg_{index}_of"
                       f"{kernel.template_arguments}(); }}")
        else:
            out.append(f"SHIMKIT_EXPORT unsigned long shimkit_tg_{index}() {{ return {sizes}; }}")
    out.append('SHIMKIT_EXPORT const char* shimkit_last_error() { return shimkit_metal::last_error.c_str(); }')
    return "\n".join(out) + "\n"
