"""The pass protocol: torch.fx ``PassBase`` compatible, callable the way ``AotiBackend`` calls passes.

``AotiBackend.preprocess`` calls each custom pass as ``custom_pass(graph_module)``, or as
``custom_pass(exported_program)`` when the pass has ``requires_exported_program = True``, and ignores
the return value. A :class:`ShimkitPass` accepts either (and a bare ``torch.fx.Graph``, which is what
Inductor hands a ``post_grad_custom_post_pass``), changes the graph in place and returns a
``torch.fx.passes.infra.pass_base.PassResult``, so it also works inside torch's ``PassManager``.

A subclass implements :meth:`ShimkitPass.transform` on the graph and returns whether it changed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, TensorArgument
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from shimkit.passes.ops import is_edge

__all__ = ["PROVENANCE_META", "PassContext", "PassError", "PassResult", "ShimkitPass", "describe_node", "mark_stale",
           "verified_as_edge"]

# What a node made by a pass inherits from the node it replaces or derives from, so errors, profiles
# and the audit still point at the user's source line and module.
PROVENANCE_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "from_node", "custom")


class PassError(RuntimeError):
    """A pass could not handle a node; the message names the pass, the node and its source line."""

    def __init__(self, pass_name: str, node: fx.Node | None, message: str) -> None:
        where = f" at {describe_node(node)}" if node is not None else ""
        super().__init__(f"[{pass_name}]{where}: {message}")
        self.pass_name = pass_name
        self.node = node


def describe_node(node: fx.Node) -> str:
    """``name = target(args)`` plus the user source line the node was traced from, when known."""
    text = node.format_node() or node.name
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
        # The innermost frame is the last "File ..." line, followed by the source text.
        frames = [i for i, line in enumerate(lines) if line.startswith("File ")]
        if frames:
            text += f" (from {' '.join(lines[frames[-1]:frames[-1] + 2])})"
    return text


@dataclass
class PassContext:
    """What a pass may consult besides the graph.

    ``exported_program`` is present when the pass was called on one: its graph signature says which
    outputs are written back into buffers or inputs. ``module`` owns the graph when there is one
    (a bare Inductor post-grad ``Graph`` still has ``owning_module``).
    """

    module: torch.nn.Module | None = None
    exported_program: ExportedProgram | None = None

    def mutated_output_indices(self) -> set[int] | None:
        """Positions in the output node's tuple written back to buffers or inputs.

        ``None`` means unknown (no signature): callers must then treat every output as one.
        """
        if self.exported_program is None:
            return None
        return {i for i, spec in enumerate(self.exported_program.graph_signature.output_specs)
                if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)}

    def mutated_placeholders(self) -> set[str] | None:
        """Names of placeholder nodes (buffers, user inputs) the program writes back to."""
        if self.exported_program is None:
            return None
        return _mutated_input_names(self.exported_program)


def verified_as_edge(graph: fx.Graph, context: PassContext) -> bool:
    """Whether what a pass leaves in ``graph`` must pass the edge dialect's verifier.

    ExecuTorch applies a pass to an edge program with ``EdgeProgramManager.transform``, which hands it the
    program's ``GraphModule`` and then verifies the result: only core ATen ops (and the ``*_copy`` views),
    each wrapped as an edge op, with tensor operands where the schema says tensor. ``AotiBackend.preprocess``
    hands a ``requires_exported_program`` pass the ``ExportedProgram`` itself, right before Inductor
    compiles it, and verifies nothing: there a pass may write what Inductor lowers best (``reshape``,
    ``split``, a scalar operand). An ATen-dialect graph is checked by nothing either (``to_edge`` decomposes
    it afterwards).
    """
    return context.exported_program is None and any(
        is_edge(node.target) for node in graph.nodes if node.op == "call_function")


def _mutated_input_names(program: ExportedProgram) -> set[str]:
    signature = program.graph_signature
    targets = set(signature.buffers_to_mutate.values()) | set(signature.user_inputs_to_mutate.values())
    names = set()
    for spec in signature.input_specs:
        if isinstance(spec.arg, TensorArgument) and (spec.target in targets or spec.arg.name in targets):
            names.add(spec.arg.name)
    return names


class ShimkitPass(PassBase):
    """Base class of shimkit's graph passes.

    Subclasses set ``name`` (the registry and pipeline reports use it), may set
    ``requires_exported_program`` (``AotiBackend`` then passes the ``ExportedProgram``), and implement
    :meth:`transform`. The pipeline protocol is declared here, once: ``idempotent`` (a second run on an
    unchanged graph changes nothing, so a pipeline may skip it), ``after`` and ``before`` (names of
    passes this one must follow or precede in a :class:`~shimkit.passes.Pipeline`). Foreign passes
    may carry the same attributes.

    A pass leaves an edge program that the edge verifier accepts wherever it must
    (:func:`verified_as_edge`), or it sets ``only_before_inductor``: it writes what only Inductor takes, and
    raises :class:`PassError` when handed an edge program to verify.
    """

    name: ClassVar[str] = ""
    requires_exported_program: ClassVar[bool] = False
    only_before_inductor: ClassVar[bool] = False
    idempotent: ClassVar[bool] = True
    after: ClassVar[tuple[str, ...]] = ()
    before: ClassVar[tuple[str, ...]] = ()

    @property
    def pass_name(self) -> str:
        return self.name or type(self).__name__

    def transform(self, graph: fx.Graph, context: PassContext) -> bool:
        """Change ``graph`` in place; return whether anything changed."""
        raise NotImplementedError(f"{type(self).__name__} must implement transform()")

    def __call__(self, target: Any) -> PassResult:  # type: ignore[override]
        graph, module, program = unpack_target(target, self.pass_name)
        result_module = module if module is not None else graph
        if isinstance(module, fx.GraphModule):
            self.requires(module)
        modified = bool(self.transform(graph, PassContext(module=module, exported_program=program)))
        if modified:
            # Inductor regenerates its own module's code; only modules we were handed are marked.
            finish_modification(graph, None if isinstance(target, fx.Graph) else module, program)
        if isinstance(module, fx.GraphModule):
            self.ensures(module)
        return PassResult(result_module, modified)

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        return self(graph_module)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.pass_name!r}>"


def unpack_target(target: Any, pass_name: str) -> tuple[fx.Graph, torch.nn.Module | None, ExportedProgram | None]:
    if isinstance(target, ExportedProgram):
        return target.graph_module.graph, target.graph_module, target
    if isinstance(target, fx.GraphModule):
        return target.graph, target, None
    if isinstance(target, fx.Graph):
        return target, target.owning_module, None
    raise TypeError(f"[{pass_name}] expects a torch.fx.GraphModule, torch.fx.Graph or ExportedProgram, "
                    f"got {type(target).__name__}")


def finish_modification(graph: fx.Graph, module: torch.nn.Module | None,
                        program: ExportedProgram | None) -> None:
    """Keep the owner consistent with a changed graph: output names in the signature, stale code."""
    if program is not None:
        sync_output_signature(program)
    if isinstance(module, fx.GraphModule) and module.graph is graph:
        mark_stale(module)


def sync_output_signature(program: ExportedProgram) -> None:
    """Point each output spec at the node now in its output slot (a replaced output changes name)."""
    output = program.graph_module.graph.output_node()
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    for spec, value in zip(program.graph_signature.output_specs, values):
        if isinstance(spec.arg, TensorArgument) and isinstance(value, fx.Node) and spec.arg.name != value.name:
            spec.arg = TensorArgument(name=value.name)


class _RegenerateOnRead:
    """Stands in for ``GraphModule._code`` until the code is regenerated.

    Regenerating Python for a 2,500-node graph costs ~140 ms, more than all of shimkit's passes on it,
    and ``AotiBackend`` never runs that code (it rebuilds the module with ``ExportedProgram.module()``).
    So a changed module regenerates its code only when something reads it or calls ``forward``.
    """

    def __get__(self, module: fx.GraphModule | None, owner: type) -> Any:
        if module is None:
            return self
        module.recompile()
        return module.__dict__["_code"]

    def __set__(self, module: fx.GraphModule, value: str) -> None:
        # ``GraphModule.recompile`` assigns ``_code``: the module is fresh again.
        cls = type(module)
        if cls.__dict__.get("_code") is self:
            delattr(cls, "_code")
        module.__dict__["_code"] = value


def _regenerate_then_forward(module: fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    module.recompile()
    return module.forward(*args, **kwargs)


def mark_stale(module: fx.GraphModule) -> None:
    """Regenerate ``module``'s code on first use instead of now.

    ``GraphModule`` gives every instance its own class, so replacing ``forward`` and ``_code`` on that
    class affects only this module. A ``_LazyGraphModule`` already defers.
    """
    cls = type(module)
    if hasattr(cls, "_lazy_forward") or cls is fx.GraphModule:
        # A _LazyGraphModule's recompile() only marks; a bare GraphModule class is shared.
        module.recompile()
        return
    if isinstance(cls.__dict__.get("_code"), _RegenerateOnRead):
        return
    module.__dict__.pop("_code", None)
    cls._code = _RegenerateOnRead()
    cls.forward = _regenerate_then_forward
