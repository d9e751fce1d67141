"""Run ExecuTorch's Metal lowering on a machine without MPS: fake ``mps`` tensors, nothing compiled.

``AotiBackend.preprocess`` moves the program to ``mps`` and hands it to ``torch._inductor.aot_compile``,
whose cpp-wrapper codegen is what decides which c-shim or proxy-executor kernels the generated
``.so`` calls. None of that codegen needs a GPU; only a handful of places touch the real device. Each
patch below replaces exactly one such place, for the duration of :func:`fake_mps_lowering`, and is
undone on exit, also when lowering raises (docs/metal-aoti.md, "Lowering for mps on a machine without
MPS" lists them). They all touch private Inductor and ExecuTorch details, which is why
:func:`check_torch_version` refuses releases nobody tested.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree

from shimkit._patching import ScopedPatches, importable_torchao_mps_cshim
from shimkit._versions import UnsupportedVersionError, check_release
from torch.utils._python_dispatch import TorchDispatchMode

MPS = torch.device("mps")

# Inductor sizes split reductions of its generated Metal kernels by the GPU core count. Which c-shim
# kernels the wrapper calls does not depend on it; 10 is an M2's count, a typical value.
FAKE_MPS_CORE_COUNT = 10


class AuditEnvironmentError(RuntimeError):
    """The audit cannot run in this environment (untested torch release, missing piece)."""


def check_torch_version(version: str | None = None) -> str:
    """Return the torch release, or raise :class:`AuditEnvironmentError` for an untested one (the
    fake-mps lowering patches private Inductor internals); ``SHIMKIT_SKIP_VERSION_CHECK=1`` makes it a
    warning, as for every other version check (:mod:`shimkit._versions`)."""
    try:
        return check_release("torch", version or torch.__version__,
                             what="shimkit audit (the fake-mps lowering patches private Inductor internals)")
    except UnsupportedVersionError as error:
        raise AuditEnvironmentError(str(error)) from None


class RealValues:
    """The real data behind fake constants, for the few places Inductor reads constant values.

    Keyed by fake storage, so any view of a moved parameter or constant finds its data. Inductor
    inlines scalars and 1-D constants of at most 8 elements (``GraphLowering.get_attr``); the values
    only change literals in generated Metal code, never which kernels the wrapper calls, so a fake
    tensor with no known data reads as zeros there rather than stopping the audit.
    """

    def __init__(self) -> None:
        self._by_storage: dict[int, tuple[torch.UntypedStorage, torch.Tensor]] = {}

    def remember(self, fake: torch.Tensor, real: torch.Tensor) -> None:
        storage = fake.untyped_storage()
        # Holding the fake storage keeps its address from being reused by another while we look up.
        self._by_storage[storage._cdata] = (storage, real)

    def find(self, fake: torch.Tensor) -> torch.Tensor | None:
        """The real CPU tensor ``fake`` was made from (as the same view of it), or ``None``."""
        entry = self._by_storage.get(fake.untyped_storage()._cdata)
        if entry is not None and entry[1].dtype == fake.dtype:
            return entry[1].as_strided(fake.shape, fake.stride(), fake.storage_offset())
        return None

    def lookup(self, fake: torch.Tensor) -> torch.Tensor:
        real = self.find(fake)
        return torch.zeros(fake.shape, dtype=fake.dtype) if real is None else real


def move_program_to_fake_mps(edge_program: Any, real_values: RealValues) -> Any:
    """``move_to_device_pass(ep, "mps")`` done with fake tensors: the same fields, moved the same way.

    ``Tensor.to("mps")`` needs an MPS build even on a fake tensor; ``aten._to_copy`` with a device
    kwarg goes through the fake mode's meta kernels. Moved tensors do not require grad: creating
    autograd metadata for an mps tensor aborts the process off macOS, and ``preprocess`` compiles
    under ``no_grad`` anyway.
    """
    from torch._guards import detect_fake_mode

    placeholders = [n.meta.get("val") for n in edge_program.graph.nodes if n.op == "placeholder"]
    fake_mode = detect_fake_mode(placeholders)
    if fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)

    def to_fake_mps(tensor: torch.Tensor) -> torch.Tensor:
        real = None
        if not isinstance(tensor, torch._subclasses.FakeTensor):
            # _to_copy keeps strides of a dense tensor; clone(preserve_format) makes the same choice.
            real = tensor.detach().clone(memory_format=torch.preserve_format)
            # Weights and constants have fixed shapes; without this a shape env would make them symbolic.
            tensor = fake_mode.from_tensor(real, static_shapes=True)
        with fake_mode, torch.no_grad():
            moved = torch.ops.aten._to_copy.default(tensor, device=MPS)
        if real is not None:
            real_values.remember(moved, real)
        return moved

    for key, value in list(edge_program.state_dict.items()):
        moved = to_fake_mps(value)
        edge_program._state_dict[key] = (
            torch.nn.Parameter(moved, requires_grad=False) if isinstance(value, torch.nn.Parameter)
            else moved)
    for key, value in list(edge_program.constants.items()):
        if isinstance(value, torch.Tensor):
            edge_program._constants[key] = to_fake_mps(value)
    if edge_program.example_inputs is not None:
        edge_program._example_inputs = pytree.tree_map_only(
            torch.Tensor, to_fake_mps, edge_program.example_inputs)
    for module in edge_program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if "device" in node.kwargs:
                node.kwargs = {**node.kwargs, "device": MPS}
            if node.op == "call_function" and node.target is torch.ops.aten.to.device:
                node.args = (node.args[0], MPS, *node.args[2:])
            if "val" in node.meta:
                node.meta["val"] = pytree.tree_map_only(torch.Tensor, to_fake_mps, node.meta["val"])
    # Upstream re-validates here. The edge verifier's dtype check indexes multi-output values with
    # Tensor.__getitem__, which allocates on the tensor's device and so fails for fake mps; the check
    # already passed on this very graph before the move, which changes devices, not dtypes.
    return edge_program


@dataclass
class FakeMpsSession:
    """One :func:`fake_mps_lowering` scope: its patches, the real values behind fake weights, the
    folder holding the stub files ``preprocess`` reads back, and the C++ wrapper Inductor generated for
    each graph, in order (what :mod:`shimkit.runtime.program` compiles and runs)."""

    patches: ScopedPatches
    real_values: RealValues
    workdir: str
    compiled_graphs: int = 0
    wrapper_sources: list[str] = field(default_factory=list)


def _same_fake_storage(original: Callable[..., bool]) -> Callable[..., bool]:
    # Inductor de-duplicates constants by data pointer; every fake storage reports 0, which would fold
    # all same-shaped weights into one. Fake storages are compared by identity instead.
    def is_same_tensor(data: torch.Tensor, value: torch.Tensor) -> bool:
        if isinstance(data, torch._subclasses.FakeTensor) or isinstance(value, torch._subclasses.FakeTensor):
            return (data.size() == value.size() and data.stride() == value.stride()
                    and data.dtype == value.dtype and data.device == value.device
                    and data.untyped_storage()._cdata == value.untyped_storage()._cdata
                    and data.storage_offset() == value.storage_offset())
        return original(data, value)

    return is_same_tensor


def _scaled_dot_product_attention_as_on_mps(patches: ScopedPatches) -> None:
    """Route SDPA on mps tensors the way ATen's composite does in an MPS build (attention.cpp).

    The composite first asks ``_fused_sdp_choice_stub`` whether the device has a fused kernel; a
    build without MPS asserts on that question for an mps tensor. An MPS build has none, so the math
    backend runs: ``_scaled_dot_product_attention_math_for_mps`` for inputs without dropout,
    autograd or nesting, else ``_scaled_dot_product_attention_math``. Contiguity is not checked:
    macOS 15 and newer take the mps path for any layout. A boolean mask becomes additive first
    (``convert_boolean_attn_mask``: ``True`` keeps, ``False`` adds ``-inf``).

    The kernel is registered for ``AutogradMPS``, the first key an mps tensor dispatches on, so it
    serves every caller (aot-autograd tracing, and passes that run ops under fake mode) and leaves
    other devices on the stock composite. Destroying the library on exit removes it.
    """
    aten = torch.ops.aten
    for_mps = aten._scaled_dot_product_attention_math_for_mps.default
    for_mps_takes_gqa = any(a.name == "enable_gqa" for a in for_mps._schema.arguments)

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     *, scale=None, enable_gqa=False):
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(
                float("-inf"), dtype=query.dtype, device=attn_mask.device))
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if dropout_p != 0.0 or needs_grad or any(t.is_nested for t in (query, key, value)):
            return aten._scaled_dot_product_attention_math.default(
                query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
        if enable_gqa and not for_mps_takes_gqa:
            repeats = query.size(-3) // key.size(-3)
            key, value = key.repeat_interleave(repeats, -3), value.repeat_interleave(repeats, -3)
        options = {"enable_gqa": enable_gqa} if for_mps_takes_gqa else {}
        return for_mps(query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, **options)[0]

    library = torch.library.Library("aten", "IMPL")
    library.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradMPS")
    patches.on_undo(library._destroy)


class _FactoriesOnCpu(TorchDispatchMode):
    """Allocate on cpu whatever an op asks to allocate on mps."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "mps":
            kwargs["device"] = torch.device("cpu")
        return func(*args, **kwargs)


def _uniform_constants_folded_on_cpu(patches: ScopedPatches, real_values: RealValues) -> None:
    """``constant_fold_uniform_value`` evaluates ``full`` and pointwise ops for real, with fake modes
    disabled, on the graph's device, and its peephole for ``mul`` by an integer 0 makes a real zero
    there too. Only the resulting scalar and the node's own (fake) metadata make it into the graph, so
    evaluating on cpu folds the same constants. Single-element attributes it reads are fake mps
    tensors; their real value stands in.
    """
    from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder

    original = UniformValueConstantFolder._deduce_value
    original_peepholes = UniformValueConstantFolder._add_peephole_patterns

    def _add_peephole_patterns(self):
        with _FactoriesOnCpu():
            original_peepholes(self)

    def _deduce_value(self, node):
        with _FactoriesOnCpu():
            value = original(self, node)
        if isinstance(value, torch._subclasses.FakeTensor):
            return real_values.lookup(value)
        return value

    patches.replace(UniformValueConstantFolder, "_deduce_value", _deduce_value)
    patches.replace(UniformValueConstantFolder, "_add_peephole_patterns", _add_peephole_patterns)


def _slice_by_ops(tensor: torch.Tensor, index: Any) -> tuple[torch.Tensor, list] | None:
    """The basic-indexing half of Python indexing, as ``applySlicing`` (python_variable_indexing.cpp)
    applies it: an int selects, a slice slices, ``None`` unsqueezes, ``...`` skips dims. Returns the
    view and the integer index tensors left for advanced indexing (``None`` for every other dim), or
    ``None`` for forms left to the original (bool scalars and masks, non-positive steps, several
    ellipses)."""
    aten = torch.ops.aten
    entries = index if isinstance(index, tuple) else (index,)
    if sum(entry is Ellipsis for entry in entries) > 1:
        return None
    consumed = sum(not (entry is None or entry is Ellipsis) for entry in entries)
    result, dim, gathered = tensor, 0, []
    for entry in entries:
        if entry is Ellipsis:
            skipped = tensor.dim() - consumed
            gathered += [None] * skipped
            dim += skipped
        elif entry is None:
            result = aten.unsqueeze.default(result, dim)
            gathered.append(None)
            dim += 1
        elif isinstance(entry, bool):
            return None
        elif isinstance(entry, (int, torch.SymInt)):
            result = aten.select.int(result, dim, entry)
        elif isinstance(entry, slice):
            if entry.step is not None and entry.step <= 0:
                return None
            result = aten.slice.Tensor(result, dim, entry.start, entry.stop, entry.step or 1)
            gathered.append(None)
            dim += 1
        elif isinstance(entry, torch.Tensor) and not entry.dtype.is_floating_point and entry.dtype not in (
                torch.bool, torch.uint8):
            gathered.append(entry)
            dim += 1
        else:
            return None
    return result, gathered


def index_by_ops(tensor: torch.Tensor, index: Any) -> torch.Tensor | None:
    """``tensor[index]`` as ATen ops: the basic-indexing view, then one ``aten.index.Tensor``."""
    sliced = _slice_by_ops(tensor, index)
    if sliced is None:
        return None
    view, gathered = sliced
    if any(entry is not None for entry in gathered):
        return torch.ops.aten.index.Tensor(view, gathered)
    return view


def assign_by_ops(tensor: torch.Tensor, index: Any, value: Any) -> bool:
    """``tensor[index] = value`` as ATen ops (``copy_``/``fill_`` on the view, or ``index_put_``);
    returns whether the form was handled."""
    aten = torch.ops.aten
    sliced = _slice_by_ops(tensor, index)
    if sliced is None:
        return False
    view, gathered = sliced
    if any(entry is not None for entry in gathered):
        if not isinstance(value, torch.Tensor):
            value = torch.scalar_tensor(value, dtype=tensor.dtype, device=tensor.device)
        aten.index_put_.default(view, gathered, value)
    elif isinstance(value, torch.Tensor):
        aten.copy_.default(view, value)
    else:
        aten.fill_.Scalar(view, value)
    return True


def contiguous_by_ops(tensor: torch.Tensor, memory_format: torch.memory_format) -> torch.Tensor:
    """``Tensor.contiguous``: the tensor itself when already laid out so, else a clone in that layout."""
    if tensor.is_contiguous(memory_format=memory_format):
        return tensor
    return torch.ops.aten.clone.default(tensor, memory_format=memory_format)


def to_by_ops(tensor: torch.Tensor, *args: Any, copy: bool = False, **kwargs: Any) -> torch.Tensor:
    """``Tensor.to``: the tensor itself when nothing would change (``to_will_alias``), else
    ``aten._to_copy``."""
    device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    same_device = device is None or (device.type == tensor.device.type
                                     and device.index in (None, tensor.device.index))
    same_dtype = dtype is None or dtype == tensor.dtype
    keeps_layout = memory_format in (None, torch.preserve_format) or tensor.is_contiguous(
        memory_format=memory_format)
    if same_device and same_dtype and keeps_layout and not copy:
        return tensor
    return torch.ops.aten._to_copy.default(
        tensor, dtype=dtype, device=device, non_blocking=non_blocking,
        memory_format=memory_format or torch.preserve_format)


def _device_guarded_methods_on_fake_mps(patches: ScopedPatches) -> None:
    """A few hand-written ``Tensor`` methods take a C++ device guard, which a build without MPS
    cannot give for an mps tensor: indexing and index assignment, ``contiguous``, ``to``, ``copy_``,
    ``~`` (``_unsafe_masked_index``'s decomposition inverts its mask).
    Fake-mode Python code meets them when it runs a decomposition or a fake kernel only to infer
    output metadata (``grid_sampler_2d`` and ``im2col`` index with tensors, the conv1d fake kernel
    calls ``contiguous``), on fake tensors and, inside Inductor's functionalized tracing, on
    functional tensors wrapping them (``upsample_bilinear2d``'s decomposition makes a channels-last
    input ``contiguous``). On mps tensors of both kinds they are replaced by the ATen ops they perform,
    which need no guard; forms the replacements do not cover go to the original (and fail as before).
    """
    from torch._subclasses.functional_tensor import FunctionalTensor

    for tensor_cls in (torch._subclasses.FakeTensor, FunctionalTensor):
        _replace_guarded_methods(patches, tensor_cls)


def _replace_guarded_methods(patches: ScopedPatches, tensor_cls: type) -> None:
    originals = {name: getattr(tensor_cls, name)
                 for name in ("__getitem__", "__setitem__", "contiguous", "to", "copy_", "__invert__")}

    def __getitem__(self, index):
        if self.device.type == "mps":
            result = index_by_ops(self, index)
            if result is not None:
                return result
        return originals["__getitem__"](self, index)

    def __setitem__(self, index, value):
        if self.device.type != "mps" or not assign_by_ops(self, index, value):
            originals["__setitem__"](self, index, value)

    def contiguous(self, memory_format=torch.contiguous_format):
        if self.device.type == "mps":
            return contiguous_by_ops(self, memory_format)
        return originals["contiguous"](self, memory_format=memory_format)

    def to(self, *args, **kwargs):
        if self.device.type == "mps" and len(args) <= 2:
            return to_by_ops(self, *args, **kwargs)
        return originals["to"](self, *args, **kwargs)

    def copy_(self, src, non_blocking=False):
        if self.device.type == "mps":
            return torch.ops.aten.copy_.default(self, src, non_blocking)
        return originals["copy_"](self, src, non_blocking)

    def __invert__(self):
        # Only where ``~`` is defined (integers and bool); other dtypes get the original's TypeError.
        if self.device.type == "mps" and not self.dtype.is_floating_point and not self.dtype.is_complex:
            return torch.ops.aten.bitwise_not.default(self)
        return originals["__invert__"](self)

    for name, method in (("__getitem__", __getitem__), ("__setitem__", __setitem__),
                         ("contiguous", contiguous), ("to", to), ("copy_", copy_), ("__invert__", __invert__)):
        patches.replace(tensor_cls, name, method)


@contextlib.contextmanager
def fake_mps_lowering(backend_cls: Any | None = None) -> Iterator[FakeMpsSession]:
    """Make ``backend_cls.preprocess`` (default: ``MetalBackend``) lower on fake mps tensors.

    Inside the block, ``to_edge_transform_and_lower`` with the Metal partitioner runs export-side
    passes, Inductor lowering, scheduling and cpp-wrapper codegen as on a Mac; instead of compiling,
    stub ``.so``/weights files (the wrapper source, an empty blob) let ``preprocess`` finish. The
    patches are process-wide: do not lower anything else in another thread meanwhile.
    """
    check_torch_version()
    import torch._inductor.codecache as codecache
    import torch._inductor.fx_passes.joint_graph as joint_graph
    import torch._inductor.graph as inductor_graph
    import torch._inductor.utils as inductor_utils
    from torch._inductor.runtime.hints import DeviceProperties

    if backend_cls is None:
        from executorch.backends.apple.metal.metal_backend import MetalBackend

        backend_cls = MetalBackend

    patches = ScopedPatches()
    session = FakeMpsSession(patches, RealValues(), tempfile.mkdtemp(prefix="shimkit-audit-"))
    try:
        def move_program_to_device(cls, edge_program, device, compile_specs):
            return move_program_to_fake_mps(edge_program, session.real_values)

        patches.replace(backend_cls, "move_program_to_device", classmethod(move_program_to_device))

        # Pattern-matcher init traces its replacement patterns on example tensors of the input
        # device; it is cached per device and the patterns match device-independently, so tracing on
        # cpu registers the same patterns without allocating on mps.
        original_lazy_init = joint_graph.lazy_init

        def lazy_init(input_device=None, *args, **kwargs):
            if input_device is not None and torch.device(input_device).type == "mps":
                input_device = torch.device("cpu")
            return original_lazy_init(input_device, *args, **kwargs)

        patches.replace(joint_graph, "lazy_init", lazy_init)

        def compile_nothing(cls, graph, wrapper_code, kernel_code, serialized_extern_kernel_nodes, *,
                            device_type, additional_files):
            session.compiled_graphs += 1
            session.wrapper_sources.append(wrapper_code)
            index = session.compiled_graphs
            so_path = os.path.join(session.workdir, f"graph{index}.wrapper.so")
            blob_path = os.path.join(session.workdir, f"graph{index}.wrapper_weights.blob")
            with open(so_path, "w") as handle:
                handle.write(wrapper_code)
            open(blob_path, "wb").close()
            return [so_path, blob_path]

        patches.replace(codecache.AotCodeCompiler, "compile", classmethod(compile_nothing))

        original_get_attr = inductor_graph.GraphLowering.get_attr
        fake_tensor_cls = torch._subclasses.FakeTensor

        def get_attr(self, target, args, kwargs):
            # get_attr reads small constants with .item()/.tolist() under no_dispatch, which on a
            # fake mps tensor would look for a real MPS kernel.
            with _scoped(lambda p: (
                    p.replace(fake_tensor_cls, "item", lambda t: session.real_values.lookup(t).item()),
                    p.replace(fake_tensor_cls, "tolist", lambda t: session.real_values.lookup(t).tolist()))):
                return original_get_attr(self, target, args, kwargs)

        patches.replace(inductor_graph.GraphLowering, "get_attr", get_attr)

        # A constant's value is readable on a Mac (a pass may inline a 0-d constant as a scalar); on the fake
        # device it is the real value behind it. Other fake tensors keep fake semantics.
        original_item = fake_tensor_cls.item

        def item(tensor):
            real = session.real_values.find(tensor)
            return real.item() if real is not None else original_item(tensor)

        patches.replace(fake_tensor_cls, "item", item)
        patches.replace(inductor_graph, "is_same_tensor", _same_fake_storage(inductor_graph.is_same_tensor))

        patches.replace(torch.backends.mps, "get_core_count", lambda: FAKE_MPS_CORE_COUNT)
        # Answering as a Mac also enables Inductor's mps-only decisions.
        patches.replace(torch.backends.mps, "is_available", lambda: True)
        patches.replace(torch.mps, "is_available", lambda: True)
        # A Mac has no CUDA. On a machine with a GPU, Inductor would find two GPU types (get_gpu_type asserts
        # one) and dynamo would save CUDA's RNG state around each trace (which fails in a forked worker).
        patches.replace(torch.cuda, "is_available", lambda: False)
        # Inductor caches the GPU it found (functools.cache): an earlier torch.compile in this process
        # found none and cached "cuda", which would make the mps wrapper claim a cuda model. Asked
        # afresh inside the scope, and forgotten again on exit.
        inductor_utils.get_gpu_type.cache_clear()
        patches.on_undo(inductor_utils.get_gpu_type.cache_clear)
        _scaled_dot_product_attention_as_on_mps(patches)
        _uniform_constants_folded_on_cpu(patches, session.real_values)
        _device_guarded_methods_on_fake_mps(patches)
        importable_torchao_mps_cshim(patches)
        yield session
    finally:
        patches.undo()
        # DeviceProperties.create caches per device; drop the mps entry built from the fake core count.
        DeviceProperties.create.cache_clear()
        shutil.rmtree(session.workdir, ignore_errors=True)


@contextlib.contextmanager
def _scoped(apply: Callable[[ScopedPatches], Any]) -> Iterator[None]:
    patches = ScopedPatches()
    try:
        apply(patches)
        yield
    finally:
        patches.undo()
