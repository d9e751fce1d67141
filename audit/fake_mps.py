"""Run ExecuTorch's Metal lowering on a machine without MPS: fake ``mps`` tensors, nothing compiled.

``AotiBackend.preprocess`` moves the program to ``mps`` and hands it to ``torch._inductor.aot_compile``,
whose cpp-wrapper codegen is what decides which c-shim or proxy-executor kernels the generated
``.so`` calls. None of that codegen needs a GPU; only a handful of places touch the real device. Each
patch below replaces exactly one such place, for the duration of :func:`fake_mps_lowering`, and is
undone on exit, also when lowering raises (reference §7 lists them). They all touch private Inductor
and ExecuTorch details, which is why :func:`check_torch_version` refuses releases nobody tested.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

MPS = torch.device("mps")
SUPPORTED_TORCH_RELEASES = ("2.13", "2.14")
TORCHAO_MPS_CSHIM = "torchao.experimental.ops.mps.cshim"

# Inductor sizes split reductions of its generated Metal kernels by the GPU core count. Which c-shim
# kernels the wrapper calls does not depend on it; 10 is an M2's count, a typical value.
FAKE_MPS_CORE_COUNT = 10


class AuditEnvironmentError(RuntimeError):
    """The audit cannot run in this environment (untested torch release, missing piece)."""


def check_torch_version(version: str | None = None) -> str:
    """Return the torch release, or raise :class:`AuditEnvironmentError` for an untested one."""
    version = version or torch.__version__
    release = ".".join(version.split("+")[0].split(".")[:2])
    if release not in SUPPORTED_TORCH_RELEASES:
        raise AuditEnvironmentError(
            f"shimkit audit: torch {version} is not supported; the fake-mps lowering patches private "
            f"Inductor internals and is tested only with torch "
            f"{' and '.join(r + '.x' for r in SUPPORTED_TORCH_RELEASES)}")
    return release


_MISSING = object()


@dataclass
class ScopedPatches:
    """Attribute replacements that are all undone, newest first, when the scope ends."""

    applied: list[tuple[Any, Any, Any]] = field(default_factory=list)

    def replace(self, owner: Any, name: str, value: Any) -> Any:
        """Set ``owner.name`` to ``value``; returns what ``getattr`` gave before (to delegate to)."""
        before = getattr(owner, name)
        # The raw class/module dict entry, so classmethods and inherited attributes restore exactly.
        raw = vars(owner).get(name, _MISSING)
        self.applied.append((owner, name, raw))
        setattr(owner, name, value)
        return before

    def replace_item(self, mapping: dict, key: Any, value: Any) -> None:
        """Set ``mapping[key]`` (``sys.modules``, an op's ``py_kernels``) until undone."""
        self.applied.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def on_undo(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` when the scope ends, in order with the restorations around it."""
        self.applied.append((callback, None, None))

    def undo(self) -> None:
        while self.applied:
            owner, name, raw = self.applied.pop()
            if callable(owner) and name is None:
                owner()
            elif isinstance(owner, dict):
                if raw is _MISSING:
                    owner.pop(name, None)
                else:
                    owner[name] = raw
            elif raw is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, raw)


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

    def lookup(self, fake: torch.Tensor) -> torch.Tensor:
        entry = self._by_storage.get(fake.untyped_storage()._cdata)
        if entry is not None and entry[1].dtype == fake.dtype:
            return entry[1].as_strided(fake.shape, fake.stride(), fake.storage_offset())
        return torch.zeros(fake.shape, dtype=fake.dtype)


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
    """What one :func:`fake_mps_lowering` scope collected: generated wrapper code per compiled graph."""

    patches: ScopedPatches
    real_values: RealValues
    workdir: str
    wrapper_code: list[str] = field(default_factory=list)


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
    """Route SDPA on mps tensors the way ATen's composite does in an MPS build.

    The composite asks ``_fused_sdp_choice_stub`` whether the device has a fused kernel; a build
    without MPS asserts on that question. An MPS build has none, so the math backend runs, and for
    mps inputs without dropout or autograd it calls ``_scaled_dot_product_attention_math_for_mps``
    (attention.cpp). Mask conversion follows ``convert_boolean_attn_mask``: ``True`` keeps, ``False``
    adds ``-inf``. Contiguity is not checked: macOS 15 and newer take this path for any layout.
    Other devices go to the stock composite.
    """
    from torch._C import DispatchKey

    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    for_mps = torch.ops.aten._scaled_dot_product_attention_math_for_mps.default
    accepted = {argument.name for argument in for_mps._schema.arguments}
    composite = DispatchKey.CompositeImplicitAutograd

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        nested = any(t.is_nested for t in (query, key, value))
        if query.device.type != "mps" or dropout_p != 0.0 or needs_grad or nested:
            return sdpa._op_dk(composite, query, key, value, attn_mask, dropout_p, is_causal,
                               scale=scale, enable_gqa=enable_gqa)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(
                float("-inf"), dtype=query.dtype, device=attn_mask.device))
        options = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal,
                   "scale": scale, "enable_gqa": enable_gqa}
        if not enable_gqa:
            options.pop("enable_gqa")
        elif "enable_gqa" not in accepted:
            repeats = query.size(-3) // key.size(-3)
            key, value = key.repeat_interleave(repeats, -3), value.repeat_interleave(repeats, -3)
            options.pop("enable_gqa")
        return for_mps(query, key, value, **options)[0]

    patches.replace_item(sdpa.py_kernels, composite, scaled_dot_product_attention)
    # The op caches which kernel serves each dispatch key; drop that now and after restoring.
    sdpa._dispatch_cache.clear()
    patches.on_undo(sdpa._dispatch_cache.clear)


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
    disabled, on the graph's device. Only the resulting scalar and the node's own (fake) metadata
    make it into the graph, so evaluating on cpu folds the same constants. Single-element
    attributes it reads are fake mps tensors; their real value stands in.
    """
    from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder

    original = UniformValueConstantFolder._deduce_value

    def _deduce_value(self, node):
        with _FactoriesOnCpu():
            value = original(self, node)
        if isinstance(value, torch._subclasses.FakeTensor):
            return real_values.lookup(value)
        return value

    patches.replace(UniformValueConstantFolder, "_deduce_value", _deduce_value)


def _index_by_ops(tensor: torch.Tensor, index: Any) -> torch.Tensor | None:
    """Python indexing as the ATen ops ``applySlicing`` (python_variable_indexing.cpp) applies: an int
    selects, a slice slices, ``None`` unsqueezes, ``...`` skips dims, and integer index tensors are
    gathered by one ``aten.index.Tensor`` with ``None`` for every other dim. Returns ``None`` for
    forms left to the original (bool scalars and masks, non-positive steps, several ellipses)."""
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
    if any(entry is not None for entry in gathered):
        result = aten.index.Tensor(result, gathered)
    return result


def _indexing_on_fake_mps(patches: ScopedPatches) -> None:
    """``Tensor.__getitem__`` takes a C++ device guard, which a build without MPS cannot give for an
    mps tensor. Fake mode meets it when it runs a Python decomposition only to infer output metadata
    (``grid_sampler_2d`` and ``im2col`` index with ints, slices, ``...`` and tensors); the same ops,
    called directly, need no guard.
    """
    fake_tensor_cls = torch._subclasses.FakeTensor
    original = fake_tensor_cls.__getitem__

    def __getitem__(self, index):
        if self.device.type == "mps":
            result = _index_by_ops(self, index)
            if result is not None:
                return result
        return original(self, index)

    patches.replace(fake_tensor_cls, "__getitem__", __getitem__)


def _importable_torchao_cshim(patches: ScopedPatches) -> None:
    # MetalBackend.get_aoti_compile_options imports torchao's mps c-shim table, whose package loads a
    # macOS dylib at import. Its ops are registered only by that dylib, so no model here can use them
    # and an empty table is what the import would contribute.
    try:
        __import__(TORCHAO_MPS_CSHIM)
    except (ImportError, RuntimeError, OSError):
        stand_in = types.ModuleType(TORCHAO_MPS_CSHIM)
        stand_in.torchao_op_c_shim = {}  # type: ignore[attr-defined]
        patches.replace_item(sys.modules, TORCHAO_MPS_CSHIM, stand_in)


@contextlib.contextmanager
def fake_mps_lowering(backend_cls: type | None = None) -> Iterator[FakeMpsSession]:
    """Make ``backend_cls.preprocess`` (default: ``MetalBackend``) lower on fake mps tensors.

    Inside the block, ``to_edge_transform_and_lower`` with the Metal partitioner runs export-side
    passes, Inductor lowering, scheduling and cpp-wrapper codegen as on a Mac; the generated wrapper
    is kept in the session instead of being compiled, and stub ``.so``/weights files (the wrapper
    source, an empty blob) let ``preprocess`` finish.
    """
    check_torch_version()
    import torch._inductor.codecache as codecache
    import torch._inductor.fx_passes.joint_graph as joint_graph
    import torch._inductor.graph as inductor_graph
    from torch._inductor.runtime.hints import DeviceProperties

    if backend_cls is None:
        from executorch.backends.apple.metal.metal_backend import MetalBackend as backend_cls

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
            session.wrapper_code.append(wrapper_code)
            index = len(session.wrapper_code)
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
        patches.replace(inductor_graph, "is_same_tensor", _same_fake_storage(inductor_graph.is_same_tensor))

        patches.replace(torch.backends.mps, "get_core_count", lambda: FAKE_MPS_CORE_COUNT)
        # Answering as a Mac also enables Inductor's mps-only decisions.
        patches.replace(torch.backends.mps, "is_available", lambda: True)
        patches.replace(torch.mps, "is_available", lambda: True)
        _scaled_dot_product_attention_as_on_mps(patches)
        _uniform_constants_folded_on_cpu(patches, session.real_values)
        _indexing_on_fake_mps(patches)
        _importable_torchao_cshim(patches)
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
