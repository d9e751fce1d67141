"""The small, frozen records that plugins hand to the registry.

A record validates itself on construction, so a malformed one is rejected at the plugin that made it
(the registry reports that plugin by name) rather than deep inside a lowering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from shimkit.registry.errors import InvalidPluginRecord, UnknownOpError
from shimkit.registry.ops import canonical_op_name, try_resolve_op

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a runtime build compiles: Objective-C++/C++/C, Metal Shading Language and CUDA C++ sources.
KERNEL_SOURCE_SUFFIXES = (".mm", ".m", ".cpp", ".cc", ".cxx", ".c", ".metal", ".cu")
# Kernel paths reach generated CMake: a character CMake's quoting or list syntax would reinterpret
# (newlines, ';' which splits lists, other control characters) is refused rather than escaped away.
_UNSAFE_PATH_CHARACTER = re.compile(r"[\x00-\x1f\x7f;]")
# A prototype Inductor pastes into generated C++: identifiers, pointers and commas only, so no
# plugin string can close the declaration and start code of its own.
_C_PARAMETERS = re.compile(r"^[A-Za-z0-9_*\s,]*$")
_PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
DEVICES = ("mps", "cuda")
STAGES = ("pre_edge", "graph", "post_grad")


def _fail(record: str, name: str, message: str) -> None:
    raise InvalidPluginRecord(f"{record} {name!r}: {message}")


def _op(record: str, name: str, op: Any) -> str:
    try:
        return canonical_op_name(op)
    except UnknownOpError as error:
        raise InvalidPluginRecord(f"{record} {name!r}: {error}") from None


def _op_mapping(record: str, name: str, label: str, value: Mapping[Any, Any],
                callable_values: bool = True) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(record, name, f"{label} must be a mapping from op to value, got {type(value).__name__}")
    out = {}
    for op, item in value.items():
        if callable_values and not callable(item):
            _fail(record, name, f"{label}[{op!r}] must be callable, got {type(item).__name__}")
        out[_op(record, name, op)] = item
    return MappingProxyType(out)


def _devices(record: str, name: str, label: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)):
        _fail(record, name, f"{label} must be a sequence of devices, not one string")
    if not isinstance(value, Iterable):
        _fail(record, name, f"{label} must be a sequence of devices, got {type(value).__name__}")
    devices = tuple(value)
    for device in devices:
        if device not in DEVICES:
            _fail(record, name, f"{label}: device must be one of {DEVICES}, got {device!r}")
    return devices


def _check_path_text(record: str, label: str, what: str, text: str) -> None:
    if _UNSAFE_PATH_CHARACTER.search(text):
        _fail(record, label, f"{what} {text!r} holds a control character or ';', which a CMake source "
              f"list cannot carry")


# MSL element type names an MslKernel may be instantiated for, and the torch dtype each one means.
MSL_DTYPES = ("float", "half", "bfloat", "int", "long", "short", "char", "uchar", "bool")


@dataclass(frozen=True)
class MslKernel:
    """A Metal Shading Language compute kernel that implements a shim.

    ``source`` is the ``.metal`` file (one of the kernel's ``runtime_sources``) and must define
    ``{function}_{dtype}`` (usually a template instantiated with ``[[host_name]]``) for each of ``dtypes``
    (MSL type names). On Linux, ``shimkit.testing`` runs it through ``shimkit.metal`` against the plugin's
    reference in each dtype.

    Without ``launch`` the kernel is *elementwise*: the c-shim adapter (generated once for all such
    kernels, docs/kernels.md) dispatches one thread per element of ``out``, binding ``out`` and then the
    op's tensor arguments in schema order as buffers 0, 1, ...; every tensor is contiguous with ``out``'s
    shape and dtype.

    Any other dispatch is written once as ``launch(library, *args, **kwargs)``: it takes the compiled
    library (``shimkit.metal`` on Linux, ``torch.mps.compile_shader`` on a Mac: one calling convention)
    and the op's arguments, allocates the results, calls the kernels and returns what the op returns.
    The kernel then ships its own c-shim adapter (an ``.mm`` among ``runtime_sources``) that dispatches
    the same way on ExecuTorch's Metal runtime.

    >>> MslKernel(source="logaddexp.metal", function="logaddexp", dtypes=("float", "half"))
    MslKernel(source='logaddexp.metal', function='logaddexp', dtypes=('float', 'half'), launch=None)
    >>> MslKernel(source="sort.metal", function="sort_stable", launch=launch_sort)   # doctest: +SKIP
    """

    source: str
    function: str
    dtypes: tuple[str, ...] = ("float", "half", "bfloat")
    launch: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        label = self.function if isinstance(self.function, str) else repr(self.function)
        if not isinstance(self.source, str) or not self.source.endswith(".metal"):
            _fail("MslKernel", label, f"source must name a .metal file, got {self.source!r}")
        if not isinstance(self.function, str) or not _C_IDENTIFIER.match(self.function):
            _fail("MslKernel", label, "function must be an identifier (the kernels are function_dtype)")
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        unknown = [d for d in self.dtypes if d not in MSL_DTYPES]
        if not self.dtypes or unknown:
            _fail("MslKernel", label, f"dtypes must be MSL type names from {MSL_DTYPES}, got {self.dtypes!r}")
        if self.launch is not None and not callable(self.launch):
            _fail("MslKernel", label, f"launch must be callable (library, *args, **kwargs), got {self.launch!r}")

    def names(self) -> tuple[str, ...]:
        """The kernel names the library must define, one per dtype."""
        return tuple(f"{self.function}_{dtype}" for dtype in self.dtypes)


@dataclass(frozen=True)
class Kernel:
    """Code a plugin ships for its shims, built two ways: into the device runtime (ExecuTorch's build
    compiles ``runtime_sources``), and into a *host module* that runs the same kernel logic on any
    machine, so that tests check it against the plugin's reference on Linux.

    ``directory`` is the folder holding the files, absolute: ``Path(__file__).parent / "kernel"``
    works from any installed package. Sources are file names relative to it: portable C++ (``.cpp``),
    Objective-C++ for a Metal host (``.mm``), Metal Shading Language (``.metal``) and CUDA C++ for the
    CUDA runtime (``.cu``). The host module
    is either built by shimkit from ``host_sources`` on first use (a pybind11 module whose bindings
    file starts with ``PYBIND11_MODULE(SHIMKIT_HOST_MODULE, m)``; ``links_libtorch`` links libtorch
    for c-shim adapters over real ``AtenTensorHandle``\\ s) or is the plugin package's own compiled
    extension named by ``host_module``. ``entry_points`` are the names the host module must define
    (functions or exported C symbols); loading checks them. ``uses_sdk`` compiles shimkit's kernel SDK
    (``shimkit/*.h`` helpers) into both builds. ``msl`` declares an MSL compute kernel (an
    :class:`MslKernel`) that shimkit's generated adapter dispatches: its host is ``shimkit.metal``.
    On Linux, shimkit's stand-in of the device runtime (:mod:`shimkit.runtime.program`, which runs whole lowered
    programs) compiles the ``runtime_sources`` as they are: ``.cpp`` as C++, ``.mm`` as Objective-C++ against
    :mod:`shimkit.objc`'s Metal and MPSGraph on the CPU.

    >>> kernel = Kernel(name="addmm", directory=str(KERNEL_DIR),
    ...                 runtime_sources=("addmm_plan.cpp", "addmm_metal.mm", "addmm_shim_mps.mm"),
    ...                 host_sources=("addmm_plan.cpp", "addmm_reference.cpp", "addmm_bindings.cpp"),
    ...                 entry_points=("addmm_plan", "addmm_reference_out"))   # doctest: +SKIP
    >>> kernel.runtime_paths[0]                                                # doctest: +SKIP
    '/.../shimkit/plugins/addmm/kernel/addmm_plan.cpp'
    """

    name: str
    directory: str
    runtime_sources: tuple[str, ...] = ()
    host_sources: tuple[str, ...] = ()
    host_module: str | None = None
    entry_points: tuple[str, ...] = ()
    links_libtorch: bool = False
    uses_sdk: bool = True
    msl: MslKernel | None = None

    def __post_init__(self) -> None:
        label = self.name if isinstance(self.name, str) else repr(self.name)
        if not isinstance(self.name, str) or not _C_IDENTIFIER.match(self.name):
            _fail("Kernel", label, "name must be a C identifier (it names the host module)")
        directory = Path(str(self.directory))
        if not directory.is_absolute():
            _fail("Kernel", label, f"directory {str(self.directory)!r} must be an absolute path")
        _check_path_text("Kernel", label, "directory", str(directory))
        if not directory.is_dir():
            _fail("Kernel", label, f"directory {str(directory)!r} does not exist")
        object.__setattr__(self, "directory", str(directory))
        for role in ("runtime_sources", "host_sources"):
            sources = tuple(str(s) for s in getattr(self, role))
            object.__setattr__(self, role, sources)
            for source in sources:
                self._check_source(label, role, source)
        if self.host_sources and self.host_module is not None:
            _fail("Kernel", label, "give `host_sources` (shimkit builds the host module) or `host_module` "
                  "(the package's own extension), not both")
        if self.host_module is not None and not (
                isinstance(self.host_module, str) and all(map(_C_IDENTIFIER.match, self.host_module.split(".")))):
            _fail("Kernel", label, f"host_module must be a dotted import name, got {self.host_module!r}")
        object.__setattr__(self, "entry_points", tuple(self.entry_points))
        for entry in self.entry_points:
            if not isinstance(entry, str) or not _C_IDENTIFIER.match(entry):
                _fail("Kernel", label, f"entry point {entry!r} must be an identifier")
        if self.entry_points and not (self.host_sources or self.host_module):
            _fail("Kernel", label, "entry_points name what the host module defines, but there is none")
        if self.msl is not None:
            if not isinstance(self.msl, MslKernel):
                _fail("Kernel", label, f"msl must be an MslKernel record, got {type(self.msl).__name__}")
            if self.msl.source not in self.runtime_sources:
                _fail("Kernel", label, f"msl source {self.msl.source!r} must be one of the runtime_sources")
            if self.msl.launch is not None and not any(s.endswith(".mm") for s in self.runtime_sources):
                _fail("Kernel", label, "an MSL kernel with its own `launch` ships its own c-shim adapter: "
                      "add the .mm that dispatches it on the Metal runtime to runtime_sources")

    def _check_source(self, label: str, role: str, source: str) -> None:
        relative = Path(source)
        if relative.is_absolute() or ".." in relative.parts or not source:
            _fail("Kernel", label, f"{role} entry {source!r} must be a path inside `directory` (relative, "
                  f"no '..')")
        _check_path_text("Kernel", label, role[:-1], source)
        if relative.suffix not in KERNEL_SOURCE_SUFFIXES:
            _fail("Kernel", label, f"{role} entry {source!r} is not a kernel source (expected one of "
                  f"{', '.join(KERNEL_SOURCE_SUFFIXES)})")
        if not (Path(self.directory) / relative).is_file():
            _fail("Kernel", label, f"{role} entry {source!r} does not exist in {self.directory}")

    @property
    def runtime_paths(self) -> tuple[str, ...]:
        """``runtime_sources`` as absolute paths, for the runtime build."""
        return tuple(str(Path(self.directory) / s) for s in self.runtime_sources)

    @property
    def msl_path(self) -> str | None:
        """The absolute path of the MSL kernel's source, if the kernel declares one."""
        return str(Path(self.directory) / self.msl.source) if self.msl is not None else None

    @property
    def host_paths(self) -> tuple[str, ...]:
        """``host_sources`` as absolute paths, for the host module build."""
        return tuple(str(Path(self.directory) / s) for s in self.host_sources)


@dataclass(frozen=True)
class Shim:
    """How one op runs on one device: a C symbol the runtime resolves, with its kernel.

    ``symbol`` is the C function (``aoti_torch_{device}_{op}``); ``recorded_names`` are the other names
    Inductor records for the same call (``at::_ops::topk::call``, a custom op's schema name such as
    ``metal::gather_qmv``). Exactly one of ``kernel`` (a :class:`Kernel` the plugin ships, compiled into the
    runtime) and ``provided_by_runtime`` (the stock runtime already implements it) says where it lives.
    ``c_prototype`` is required for custom (non-ATen) ops: it is what
    ``aot_inductor.custom_ops_to_c_shims`` needs to emit the call. ``dense_operands`` names the op's arguments
    (by their schema names) that the shim reads as dense row-major memory of their sizes, whatever their strides,
    as upstream's ``op_convolution.mm`` reads ``input`` and ``weight``: the backend config then makes the generated
    program hand them over dense (``shimkit.backend.inductor_options``).

    >>> Shim(op="aten::mm", device="mps", symbol="aoti_torch_mps_mm_out", provided_by_runtime=True)
    Shim(op='aten::mm.default', device='mps', symbol='aoti_torch_mps_mm_out', ...)
    """

    op: str
    device: str
    symbol: str
    recorded_names: tuple[str, ...] = ()
    c_prototype: str | None = None
    kernel: Kernel | None = None
    provided_by_runtime: bool = False
    dense_operands: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        label = self.symbol if isinstance(self.symbol, str) else repr(self.symbol)
        object.__setattr__(self, "op", _op("Shim", label, self.op))
        if self.device not in DEVICES:
            _fail("Shim", label, f"device must be one of {DEVICES}, got {self.device!r}")
        if not isinstance(self.symbol, str) or not _C_IDENTIFIER.match(self.symbol):
            _fail("Shim", label, "symbol must be a C identifier")
        object.__setattr__(self, "recorded_names", tuple(self.recorded_names))
        if not all(isinstance(n, str) and n for n in self.recorded_names):
            _fail("Shim", label, "recorded_names must be non-empty strings")
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            _fail("Shim", label, f"kernel must be a Kernel record, got {type(self.kernel).__name__}")
        if isinstance(self.dense_operands, str):
            _fail("Shim", label, "dense_operands must be a tuple of argument names, not one string")
        object.__setattr__(self, "dense_operands", tuple(self.dense_operands))
        if not all(isinstance(n, str) and _C_IDENTIFIER.match(n) for n in self.dense_operands):
            _fail("Shim", label, f"dense_operands must be argument names (identifiers), got {self.dense_operands!r}")
        overload = try_resolve_op(self.op) if self.dense_operands else None
        if overload is not None:  # an op no loaded library defines yet is checked by nothing else either
            arguments = [argument.name for argument in overload._schema.arguments]
            unknown = [name for name in self.dense_operands if name not in arguments]
            if unknown:
                _fail("Shim", label, f"dense_operands {unknown} are not arguments of {self.op} ({', '.join(arguments)})")
        if (self.kernel is None) == (not self.provided_by_runtime):
            _fail("Shim", label, "give a `kernel` or set `provided_by_runtime=True` (exactly one)")
        if self.kernel is not None and not self.kernel.runtime_sources:
            _fail("Shim", label, f"kernel {self.kernel.name!r} has no runtime_sources for the runtime build")
        if self.c_prototype is not None:
            if not isinstance(self.c_prototype, str):
                _fail("Shim", label, "c_prototype must be a string")
            proto = self.c_prototype.strip()
            if proto.endswith(";") or proto.startswith("extern"):
                _fail("Shim", label, "c_prototype takes no 'extern' and no trailing ';'")
            head = f"AOTITorchError {self.symbol}("
            if not proto.startswith(head) or not proto.endswith(")"):
                _fail("Shim", label, f"c_prototype must read 'AOTITorchError {self.symbol}(...)'")
            if not _C_PARAMETERS.match(proto[len(head):-1]):
                _fail("Shim", label, "c_prototype parameters may hold only C identifiers, '*', commas and "
                      f"spaces, got {proto[len(head):-1]!r}")
            object.__setattr__(self, "c_prototype", proto)
            if not self.op.startswith(("aten::", "prims::")):
                called = f"aoti_torch_{self.device}_{self.op.split('::', 1)[1].rsplit('.', 1)[0]}"
                if self.symbol != called:
                    _fail("Shim", label, f"Inductor calls the c-shim of custom op {self.op} {called!r} (the "
                          "op's name after its namespace: torch/_inductor/codegen/cpp_wrapper_cpu.py, "
                          f"get_c_shim_func_name); a function named {self.symbol!r} is never called")
        elif not self.op.startswith(("aten::", "prims::")):
            _fail("Shim", label, f"custom op {self.op} needs a c_prototype for custom_ops_to_c_shims")

    @property
    def sources(self) -> tuple[str, ...]:
        """The files the runtime build compiles for this shim (absolute), none if the runtime has it."""
        return self.kernel.runtime_paths if self.kernel is not None else ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name Inductor may record for this shim, the C symbol first."""
        return (self.symbol, *self.recorded_names)

    def __repr__(self) -> str:
        return (f"Shim(op={self.op!r}, device={self.device!r}, symbol={self.symbol!r}, ...)")


@dataclass(frozen=True)
class OpCall:
    """One call of an op, as an input strategy yields it when the op takes keyword-only arguments
    (a plain tuple is positional arguments only).

    >>> OpCall((torch.zeros(2), torch.ones(2, 3), torch.ones(3)), {"beta": 0.5}).kwargs
    {'beta': 0.5}
    """

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            _fail("OpCall", "kwargs", f"kwargs must map argument names to values, got {self.kwargs!r}")
        object.__setattr__(self, "kwargs", dict(self.kwargs))


@dataclass(frozen=True)
class RandomReference:
    """The reference of a random op: the eager op, whose values no other implementation can equal, only
    draw alike. Called, it is ``function``; ``shimkit.testing`` checks implementations against it by
    distribution (equal shapes and dtypes, then a two-sample Kolmogorov-Smirnov test over repeated calls)
    instead of by value.

    >>> RandomReference(torch.rand_like)(torch.zeros(2, 3)).shape
    torch.Size([2, 3])
    """

    function: Callable[..., Any]

    def __post_init__(self) -> None:
        if not callable(self.function):
            _fail("RandomReference", repr(self.function), "function must be the eager random op (a callable)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


def as_call(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of what an input strategy yields: an :class:`OpCall` or a tuple of arguments."""
    if isinstance(value, OpCall):
        return value.args, dict(value.kwargs)
    return tuple(value), {}


@dataclass(frozen=True)
class OpPlugin:
    """What one plugin knows about a family of ops.

    Every op in ``ops`` must be handled somehow: by a ``Shim`` on some device, by a decomposition
    (applied on devices that have no shim for the op), by a pass named in ``eliminated_by`` that
    removes the op before Inductor sees it, or by Inductor itself: ``generated_on`` maps an op to the
    devices whose code generator compiles it (``aten::special_bessel_j0``: Inductor's Metal code calls
    ``c10::metal::bessel_j0_forward``). Such an op that is not core ATen is let through the edge
    verifier (``BackendConfig.edge_compile_config()``), which otherwise stops it before any backend.
    ``references`` (eager implementations) and ``input_strategies`` (callables returning hypothesis
    strategies of argument tuples, or of :class:`OpCall`\\ s for ops with keyword-only arguments) feed
    the tests.
    ``priority`` settles a clash over the same (op, device): the higher one wins; equal priorities are a
    :class:`~shimkit.registry.errors.PluginConflictError`. ``pre_edge`` lists ops whose decomposition must
    run on the exported program *before* ``to_edge``, because the edge dialect rejects them outright
    (``aten.addmv`` is not core ATen, and the AOTI partitioner keeps every op undecomposed):
    ``BackendConfig.prepare_for_edge`` applies them. ``decomposition_devices`` limits the decompositions
    to the devices whose code generator needs them (``("mps",)``: Inductor scans and has ``sinh`` on CUDA,
    not on Metal); ``None`` applies them on every device without a shim.

    >>> import torch
    >>> OpPlugin(
    ...     name="addmm",
    ...     ops=(torch.ops.aten.addmm.default,),
    ...     decompositions={torch.ops.aten.addmm.default: lambda s, a, b, beta=1, alpha=1: ...},
    ...     doc="addmm as mm plus a scaled add where the device has no addmm shim.",
    ... ).ops
    ('aten::addmm.default',)
    """

    name: str
    ops: tuple[str, ...]
    shims: tuple[Shim, ...] = ()
    decompositions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    eliminated_by: Mapping[str, str] = field(default_factory=dict)
    references: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    input_strategies: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    priority: int = 0
    doc: str = ""
    pre_edge: tuple[str, ...] = ()
    decomposition_devices: tuple[str, ...] | None = None
    generated_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _PLUGIN_NAME.match(name):
            _fail("OpPlugin", str(name), "name must match [a-z0-9][a-z0-9_.-]*")
        if self.decomposition_devices is not None:
            object.__setattr__(self, "decomposition_devices",
                               _devices("OpPlugin", name, "decomposition_devices", self.decomposition_devices))
        if isinstance(self.ops, (str, bytes)) or not self.ops:
            _fail("OpPlugin", name, "ops must be a non-empty sequence of operators")
        ops = tuple(dict.fromkeys(_op("OpPlugin", name, op) for op in self.ops))
        object.__setattr__(self, "ops", ops)
        shims = tuple(self.shims)
        for shim in shims:
            if not isinstance(shim, Shim):
                _fail("OpPlugin", name, f"shims must hold Shim records, got {type(shim).__name__}")
            if shim.op not in ops:
                _fail("OpPlugin", name, f"shim {shim.symbol} is for {shim.op}, which is not in ops")
        object.__setattr__(self, "shims", shims)
        for label in ("decompositions", "references", "input_strategies", "eliminated_by"):
            mapping = _op_mapping("OpPlugin", name, label, getattr(self, label),
                                  callable_values=label != "eliminated_by")
            stray = sorted(set(mapping) - set(ops))
            if stray:
                _fail("OpPlugin", name, f"{label} names ops not in ops: {', '.join(stray)}")
            object.__setattr__(self, label, mapping)
        for op, pass_name in self.eliminated_by.items():
            if not isinstance(pass_name, str) or not pass_name:
                _fail("OpPlugin", name, f"eliminated_by[{op}] must name a pass")
        generated_on = {}
        for op, op_devices in _op_mapping("OpPlugin", name, "generated_on", self.generated_on,
                                          callable_values=False).items():
            if op not in ops:
                _fail("OpPlugin", name, f"generated_on names an op not in ops: {op}")
            generated_on[op] = _devices("OpPlugin", name, f"generated_on[{op}]", op_devices)
            if not generated_on[op]:
                _fail("OpPlugin", name, f"generated_on[{op}] names no device")
        object.__setattr__(self, "generated_on", MappingProxyType(generated_on))
        handled = ({s.op for s in shims} | set(self.decompositions) | set(self.eliminated_by)
                   | set(generated_on))
        unhandled = [op for op in ops if op not in handled]
        if unhandled:
            _fail("OpPlugin", name, f"no shim, decomposition, eliminating pass or generated_on device for "
                  f"{', '.join(unhandled)}")
        if not isinstance(self.priority, int):
            _fail("OpPlugin", name, "priority must be an int")
        if isinstance(self.pre_edge, (str, bytes)):
            _fail("OpPlugin", name, "pre_edge must be a sequence of ops, not one string")
        pre_edge = tuple(dict.fromkeys(_op("OpPlugin", name, op) for op in self.pre_edge))
        undecomposed = [op for op in pre_edge if op not in self.decompositions]
        if undecomposed:
            _fail("OpPlugin", name, f"pre_edge names ops without a decomposition: {', '.join(undecomposed)}")
        object.__setattr__(self, "pre_edge", pre_edge)

    def shims_for(self, device: str) -> tuple[Shim, ...]:
        return tuple(s for s in self.shims if s.device == device)

    def generated_ops_on(self, device: str) -> tuple[str, ...]:
        """The ops this plugin says ``device``'s code generator compiles (``generated_on``)."""
        return tuple(op for op, devices in self.generated_on.items() if device in devices)

    def decomposes_on(self, device: str) -> bool:
        """Whether this plugin's decompositions apply on ``device`` (where it has no shim)."""
        return self.decomposition_devices is None or device in self.decomposition_devices

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.device for s in self.shims))


@dataclass(frozen=True)
class PassSpec:
    """A graph pass a plugin contributes to backend pipelines.

    ``factory(capabilities)`` builds the pass for one device; ``capabilities`` is a
    :class:`~shimkit.registry.derive.DeviceCapabilities` saying which ops have shims and
    decompositions there, so a pass can adapt (e.g. keep ``addmm`` where a shim exists).
    ``stage="graph"`` passes run on the edge program before Inductor (they are the backend's custom
    passes); ``stage="post_grad"`` ones run inside Inductor after its own post-grad patterns
    (``post_grad_custom_post_pass``) and take a ``torch.fx.Graph``; ``stage="pre_edge"`` ones rewrite the
    exported program in place before ``to_edge`` (``BackendConfig.prepare_for_edge``: programs the edge
    verifier would reject, such as complex ones). ``after``/``before`` name other
    passes of the same stage; a name that no active plugin provides is ignored.

    >>> PassSpec(name="view_copy_to_view", factory=lambda caps: ..., devices=("mps",)).stage
    'graph'
    """

    name: str
    factory: Callable[[Any], Callable[..., Any]]
    devices: tuple[str, ...] | None = None
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    stage: str = "graph"
    doc: str = ""

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _PLUGIN_NAME.match(name):
            _fail("PassSpec", str(name), "name must match [a-z0-9][a-z0-9_.-]*")
        if not callable(self.factory):
            _fail("PassSpec", name, "factory must be callable")
        if self.stage not in STAGES:
            _fail("PassSpec", name, f"stage must be one of {STAGES}, got {self.stage!r}")
        if self.devices is not None:
            object.__setattr__(self, "devices", _devices("PassSpec", name, "devices", self.devices))
        for label in ("after", "before"):
            value = getattr(self, label)
            if isinstance(value, str):
                _fail("PassSpec", name, f"{label} must be a tuple of pass names, not a string")
            object.__setattr__(self, label, tuple(value))
        if name in self.after or name in self.before:
            _fail("PassSpec", name, "a pass cannot be ordered against itself")

    def applies_to(self, device: str) -> bool:
        return self.devices is None or device in self.devices
