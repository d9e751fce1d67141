"""Programs as Python: the code that builds them, and runnable scripts that reproduce a failure.

:class:`~shimkit.testing.programs.Program` builds its artifacts by executing :func:`module_source` and
:func:`graph_module_source`, so a printed script is the tested program itself, not a description.
"""

from __future__ import annotations

import importlib
import operator
from dataclasses import dataclass
from typing import Any

import torch

@dataclass(frozen=True)
class Ref:
    """A value of the program, by name, inside a call's arguments."""

    name: str

    def __repr__(self) -> str:
        return self.name


_HEADER = "import operator\n\nimport torch\n"
_EDGE_IMPORT = "from executorch.exir.dialects._ops import ops as exir_ops\n"


def target_expression(target: Any, dialect: str = "aten") -> str:
    if target is operator.getitem:
        return "operator.getitem"
    namespace, rest = target._schema.name.split("::")
    overload = target._overloadname or "default"
    root = "exir_ops.edge" if dialect == "edge" and namespace == "aten" else "torch.ops"
    return f"{root}.{namespace}.{rest}.{overload}"


def value_expression(value: Any) -> str:

    if isinstance(value, Ref):
        return value.name
    if isinstance(value, list):
        return "[" + ", ".join(value_expression(v) for v in value) + "]"
    if isinstance(value, tuple):
        items = [value_expression(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, float) and value != value:
        return "float('nan')"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return f"float('{value}')"
    if isinstance(value, (torch.dtype, torch.memory_format)):
        return str(value)
    return repr(value)


def _call_text(call, dialect: str) -> tuple[str, str]:
    """(target, arguments) of a call, as Python."""
    args = [value_expression(a) for a in call.args]
    kwargs = [f"{k}={value_expression(v)}" for k, v in call.kwargs]
    return target_expression(call.target, dialect), ", ".join(args + kwargs)


def module_source(program) -> str:
    """An ``nn.Module`` named ``Program`` whose ``forward`` is the program, calling ATen ops."""
    lines = [_HEADER, "", "class Program(torch.nn.Module):", "    def __init__(self):",
             "        super().__init__()"]
    for name, recipe in program.buffers:
        lines.append(f"        self.register_buffer({name!r}, {recipe.expression()})")
    parameters = ", ".join(["self"] + [name for name, _ in program.inputs])
    lines += ["", f"    def forward({parameters}):"]
    for name, _ in program.buffers:
        lines.append(f"        {name} = self.{name}")
    for call in program.calls:
        if call.target is operator.getitem:
            lines.append(f"        {call.result} = {value_expression(call.args[0])}[{call.args[1]}]")
            continue
        target, arguments = _call_text(call, "aten")
        assign = f"{call.result} = " if call.result else ""
        lines.append(f"        {assign}{target}({arguments})")
    lines.append(f"        return {value_expression(tuple(_refs(program.outputs)))}")
    return "\n".join(lines) + "\n"


def _refs(names):

    return [Ref(n) for n in names]


def graph_module_source(program) -> str:
    """A function ``build_graph_module()`` that builds the program node by node with ``torch.fx``."""
    lines = [_HEADER + (_EDGE_IMPORT if program.dialect == "edge" else ""), "",
             "def build_graph_module():", "    root = torch.nn.Module()"]
    for name, recipe in program.buffers:
        lines.append(f"    root.register_buffer({name!r}, {recipe.expression()})")
    lines.append("    graph = torch.fx.Graph()")
    for name, _ in program.inputs:
        lines.append(f"    {name} = graph.placeholder({name!r})")
    for name, _ in program.buffers:
        lines.append(f"    {name} = graph.get_attr({name!r})")
    for call in program.calls:
        target = target_expression(call.target, program.dialect)
        args = value_expression(tuple(call.args))
        kwargs = "{" + ", ".join(f"{k!r}: {value_expression(v)}" for k, v in call.kwargs) + "}"
        assign = f"{call.result} = " if call.result else ""
        lines.append(f"    {assign}graph.call_function({target}, {args}"
                     + (f", {kwargs})" if call.kwargs else ")"))
    lines.append(f"    graph.output({value_expression(tuple(_refs(program.outputs)))})")
    lines.append("    return torch.fx.GraphModule(root, graph)")
    return "\n".join(lines) + "\n"


def inputs_source(program) -> str:
    lines = ["def make_inputs():", "    return ("]
    for name, recipe in program.inputs:
        lines.append(f"        {recipe.expression()},  # {name}: {recipe.describe()}")
    lines.append("    )")
    return "\n".join(lines) + "\n"


def transform_source(transform: Any) -> str:
    """Python that rebuilds ``transform`` as ``TRANSFORM``, or a ``None`` saying it could not."""
    if transform is None:
        return "TRANSFORM = None\n"
    kind = transform if isinstance(transform, type) or callable(transform) and hasattr(
        transform, "__qualname__") and not hasattr(transform, "__self__") else type(transform)
    module, qualname = getattr(kind, "__module__", None), getattr(kind, "__qualname__", "")
    importable = False
    if module and "<" not in qualname:
        try:
            found = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
            importable = found is kind
        except (ImportError, AttributeError):
            importable = False
    if importable and kind is transform:
        return f"from {module} import {qualname.split('.')[0]}\n\nTRANSFORM = {qualname}\n"
    if importable:
        try:
            rebuilt_repr = repr(kind())
        except Exception:  # a transform that needs arguments cannot be rebuilt blindly
            rebuilt_repr = None
        if rebuilt_repr == repr(transform):
            return f"from {module} import {qualname.split('.')[0]}\n\nTRANSFORM = {qualname}()\n"
    return f"TRANSFORM = None  # {transform!r} could not be written as code: construct it here\n"


_OBSERVE = '''

def observe(artifact, inputs):
    """Outputs, then inputs and buffers as the call left them (in-place writes count)."""
    if isinstance(artifact, torch.export.ExportedProgram):
        artifact = artifact.module()
        for name, buffer in list(artifact.named_buffers()):
            artifact.register_buffer(name, buffer.clone())
    outputs = artifact(*inputs)
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    return [t.clone() for t in outputs] + list(inputs) + [b.clone() for _, b in artifact.named_buffers()]
'''


def script(program, transform: Any = None, failure: str | None = None) -> str:
    """A self-contained script: build the program, run it, apply ``transform``, compare."""
    docstring = "Reproduces a shimkit.testing failure" + (f":\n\n{failure}\n" if failure else ".\n")
    parts = [f'"""{docstring}"""\n']
    if program.form == "fx":
        parts.append(graph_module_source(program))
        build = "def build():\n    return build_graph_module()\n"
    else:
        parts.append(module_source(program))
        build = "def build():\n    return torch.export.export(Program(), make_inputs())\n"
        if program.form == "edge":
            build = ("def build():\n    from executorch.exir import EdgeCompileConfig, to_edge\n\n"
                     "    exported = torch.export.export(Program(), make_inputs())\n"
                     "    config = EdgeCompileConfig(_check_ir_validity=False)\n"
                     "    return to_edge(exported, compile_config=config).exported_program()\n")
    parts += ["\n", inputs_source(program), "\n", build, _OBSERVE, "\n", transform_source(transform), '''

if __name__ == "__main__":
    expected = observe(build(), make_inputs())
    artifact = build()
    print(artifact.graph_module.graph if hasattr(artifact, "graph_module") else artifact.graph)
    if TRANSFORM is not None:
        TRANSFORM(artifact)
        print(artifact.graph_module.graph if hasattr(artifact, "graph_module") else artifact.graph)
        actual = observe(artifact, make_inputs())
        assert len(actual) == len(expected), f"{len(actual)} values, expected {len(expected)}"
        for index, (got, want) in enumerate(zip(actual, expected)):
            torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"value {index}: {m}")
''']
    return "".join(parts)


def program_summary(program) -> str:
    """One line per input and call: what hypothesis prints for a falsifying example."""
    inputs = ", ".join(f"{name}: {recipe.describe()}" for name, recipe in program.inputs)
    buffers = ", ".join(f"{name}: {recipe.describe()}" for name, recipe in program.buffers)
    calls = []
    for call in program.calls:
        if call.target is operator.getitem:
            calls.append(f"{call.result} = {call.args[0]!r}[{call.args[1]}]")
            continue
        target, arguments = _call_text(call, "aten")
        target = target.removeprefix("torch.ops.aten.")
        calls.append(f"{call.result} = {target}({arguments})" if call.result else f"{target}({arguments})")
    text = f"Program({program.form}, inputs=[{inputs}]"
    if buffers:
        text += f", buffers=[{buffers}]"
    return text + f", calls=[{'; '.join(calls)}], outputs={list(program.outputs)})"
