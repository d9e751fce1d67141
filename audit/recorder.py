"""Record every kernel the generated AOTInductor wrapper calls, and the graph nodes behind each.

Upstream's check (``AotiBackend.collect_unsupported_fallback_kernels``) wraps the same two
``CppWrapperCpu`` methods and derives names the same way, so a name recorded here is exactly what
upstream compares against ``get_supported_fallback_kernels()``. Unlike upstream, every call is kept
(supported or not), with the Inductor IR node being generated and, through its FX origins, the user's
source lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
import sys
from types import FrameType
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from shimkit._patching import ScopedPatches

C_SHIM = "c-shim"
PROXY_EXECUTOR = "proxy-executor"
RUNTIME = "runtime"  # a function of the runtime's own AOTI API, not a kernel

# How the C++ wrapper reads a size Inductor could not know (an unbacked symbol: nonzero's row count) from the
# tensor an op returned: torch's RAIIAtenTensorHandle methods (torch/csrc/inductor/aoti_runtime/utils.h), each a
# call of the runtime function named here.
ACCESSORS = {"size": "aoti_torch_get_size", "stride": "aoti_torch_get_stride",
             "storage_offset": "aoti_torch_get_storage_offset"}

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str
    code: str

    def describe(self) -> str:
        text = f"{self.file}:{self.line} in {self.function}"
        return f"{text}: {self.code}" if self.code else text


def _library_dirs() -> tuple[str, ...]:
    import executorch

    # executorch is a namespace package: it has __path__ entries but no __file__.
    return tuple(d + os.sep for d in (os.path.dirname(torch.__file__), *executorch.__path__))


def user_frame(stack_trace: str | None) -> SourceLine | None:
    """The user's line in an FX ``stack_trace``: the innermost frame outside torch and executorch
    (``nn.Linear.forward`` is not where the user wrote the linear), else the innermost frame."""
    if not stack_trace:
        return None
    lines = stack_trace.rstrip().splitlines()
    frames = []
    for index, line in enumerate(lines):
        match = _FRAME.search(line)
        if match:
            following = lines[index + 1].strip() if index + 1 < len(lines) else ""
            code = "" if _FRAME.search(following) else following
            frames.append(SourceLine(match["file"], int(match["line"]), match["function"], code))
    if not frames:
        return None
    return _innermost_outside(frames, _library_dirs()) or frames[-1]


def raised_at(error: BaseException) -> SourceLine | None:
    """The innermost frame of ``error``'s traceback outside torch, the audit itself and Python's import
    machinery: the model's (or a library's model code's, ExecuTorch's example models included, or a
    plugin's) line that raised, where a message alone does not say whose code failed. A ``SyntaxError`` is
    where the parser stopped."""
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return SourceLine(error.filename, error.lineno, "<module>", (error.text or "").strip())
    frames = [SourceLine(f.filename, f.lineno or 0, f.name, (f.line or "").strip())
              for f in traceback.extract_tb(error.__traceback__)]
    return _innermost_outside(frames, (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep,
                                       "<frozen "))


def _innermost_outside(frames: list[SourceLine], libraries: tuple[str, ...]) -> SourceLine | None:
    """The innermost of ``frames`` (outermost first) outside the folders ``libraries``: the user's code."""
    outside = [frame for frame in frames if not frame.file.startswith(libraries)]
    return outside[-1] if outside else None


@dataclass(frozen=True)
class GraphNode:
    """An FX node of the graph Inductor lowered (post aot-autograd), with the user's source line."""

    name: str
    target: str
    stack_trace: str | None

    @property
    def source(self) -> SourceLine | None:
        return user_frame(self.stack_trace)


@dataclass
class KernelCall:
    """One kernel name as Inductor records it, how the wrapper reaches it, and where it came from."""

    name: str
    mechanism: str  # C_SHIM or PROXY_EXECUTOR
    ir_nodes: list[str] = field(default_factory=list)
    graph_nodes: list[GraphNode] = field(default_factory=list)
    op: str | None = None  # the ATen/custom op overload behind it, where Inductor names one


def _current_ir_node() -> Any:
    """The Inductor IR node whose wrapper code is being generated, found on the call stack.

    Wrapper codegen reaches the two recorded methods from the IR node's ``codegen`` (``self`` is the
    node) or from a deferred wrapper line (``self.node``); neither passes the node down.
    """
    from torch._inductor import ir

    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, ir.ExternKernel):
            return owner
        node = getattr(owner, "node", None)
        if isinstance(node, ir.ExternKernel):
            return node
        frame = frame.f_back
    return None


def op_label(target: Any) -> str:
    """``aten::mm.default`` for any spelling of an op (edge ops included), else ``str(target)``."""
    from shimkit.registry.ops import node_op_name

    return node_op_name(target) or str(target)


def graph_node(node: Any) -> GraphNode:
    return GraphNode(node.name, op_label(node.target), node.meta.get("stack_trace"))


def _op_name(ir_node: Any) -> str | None:
    op = getattr(ir_node, "op_overload", None)
    return None if op is None else op_label(op)


def _graph_nodes(ir_node: Any) -> list[GraphNode]:
    """The FX nodes an extern kernel implements: its origin node, else those of its origins that call
    the kernel's op (origins also hold nodes fused into its inputs, such as a preceding activation)."""
    origin = getattr(ir_node, "origin_node", None)
    if origin is not None:
        nodes = [origin]
    else:
        nodes = sorted(ir_node.origins, key=lambda n: n.name)
        packet = getattr(getattr(ir_node, "op_overload", None), "_schema", None)
        if packet is not None:
            same_op = [n for n in nodes if getattr(getattr(n.target, "_schema", None), "name", None) == packet.name]
            nodes = same_op or nodes
    return [graph_node(n) for n in nodes]


@dataclass
class KernelRecorder:
    """Kernel calls in the order the wrapper generated them, merged by name; ``runtime_calls`` likewise, the
    runtime functions (:data:`RUNTIME`) the wrapper calls to read data-dependent sizes of what ops return."""

    calls: dict[str, KernelCall] = field(default_factory=dict)
    runtime_calls: dict[str, KernelCall] = field(default_factory=dict)

    def record(self, name: str, mechanism: str) -> None:
        self._record_into(self.calls, name, mechanism)

    def record_size_reads(self, unbacked_bindings: dict[Any, Any] | None) -> None:
        """The accessors the wrapper will call to bind ``unbacked_bindings`` (symbol: key path into the op's
        outputs, such as ``[CallMethodKey("size"), SequenceKey(0)]``)."""
        from torch.fx.experimental.symbolic_shapes import CallMethodKey

        for keypath in (unbacked_bindings or {}).values():
            for key in keypath:
                if isinstance(key, CallMethodKey) and key.name in ACCESSORS:
                    self._record_into(self.runtime_calls, ACCESSORS[key.name], RUNTIME)

    def _record_into(self, calls: dict[str, KernelCall], name: str, mechanism: str) -> None:
        call = calls.setdefault(name, KernelCall(name, mechanism))
        ir_node = _current_ir_node()
        if ir_node is None:
            return
        ir_name = ir_node.get_name()
        if ir_name in call.ir_nodes:
            return
        call.ir_nodes.append(ir_name)
        call.op = call.op or _op_name(ir_node)
        known = {n.name for n in call.graph_nodes}
        call.graph_nodes += [n for n in _graph_nodes(ir_node) if n.name not in known]

    @contextlib.contextmanager
    def recording(self) -> Iterator["KernelRecorder"]:
        """Wrap the wrapper-codegen methods upstream's check wraps, and the one that reads data-dependent sizes;
        undone on exit."""
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

        patches = ScopedPatches()
        original_c_shim_call = CppWrapperCpu.generate_c_shim_extern_kernel_call
        original_runtime_lookup = CppWrapperCpu.generate_fallback_kernel_with_runtime_lookup_aot
        original_size_reads = CppWrapperCpu.codegen_unbacked_symbol_defs_for_outputs
        recorder = self

        def generate_c_shim_extern_kernel_call(self, kernel, *args, **kwargs):
            recorder.record(kernel, C_SHIM)
            return original_c_shim_call(self, kernel, *args, **kwargs)

        def generate_fallback_kernel_with_runtime_lookup_aot(self, op_overload, *args, **kwargs):
            recorder.record(getattr(op_overload, "_name", str(op_overload)), PROXY_EXECUTOR)
            return original_runtime_lookup(self, op_overload, *args, **kwargs)

        def codegen_unbacked_symbol_defs_for_outputs(self, output_name, outputs, unbacked_bindings, *args, **kwargs):
            recorder.record_size_reads(unbacked_bindings)
            return original_size_reads(self, output_name, outputs, unbacked_bindings, *args, **kwargs)

        try:
            patches.replace(CppWrapperCpu, "generate_c_shim_extern_kernel_call",
                            generate_c_shim_extern_kernel_call)
            patches.replace(CppWrapperCpu, "codegen_unbacked_symbol_defs_for_outputs",
                            codegen_unbacked_symbol_defs_for_outputs)
            patches.replace(CppWrapperCpu, "generate_fallback_kernel_with_runtime_lookup_aot",
                            generate_fallback_kernel_with_runtime_lookup_aot)
            yield self
        finally:
            patches.undo()
