"""MLX's ``mx.fast.metal_kernel`` calling convention, run on the CPU by ``shimkit.metal``.

MLX kernel authors write only a kernel *body*; MLX writes the signature from the inputs it is called
with. :func:`metal_kernel` writes the same signature by the same rules (MLX's ``write_signature`` in
``mlx/fast.cpp``) and compiles it with :func:`shimkit.metal.compile_shader`:

* each input becomes ``const device T* name [[buffer(i)]]`` (``const constant`` when it has fewer than
  8 elements, ``T&`` when it is 0-d), ``T`` being MLX's type name (``float``, ``float16_t``,
  ``bfloat16_t``, ``int32_t`` ...); a Python ``int``/``float``/``bool`` input is a 0-d ``int32`` /
  ``float32`` / ``bool`` array, as in MLX;
* ``name_shape`` (``const constant int*``), ``name_strides`` (``const constant int64_t*``, in elements)
  and ``name_ndim`` (``const constant int&``) follow an input when the source mentions them;
* outputs are ``device T* name`` (``device atomic<T>*`` with ``atomic_outputs``), filled with
  ``init_value`` when given;
* every thread attribute whose name occurs in the source is declared (``uint3 thread_position_in_grid
  [[thread_position_in_grid]]`` ...);
* ``template=[("T", dtype), ("N", 4), ("flag", True)]`` makes it a template instantiated once;
* ``grid`` counts threads (``dispatchThreads``), ``threadgroup`` is clipped to the grid per dimension.

Inputs may be torch tensors, NumPy arrays or MLX arrays, and dtypes torch, NumPy or MLX dtypes: the
outputs are MLX arrays when any input is one (so MLX code runs unchanged with
``mx.fast.metal_kernel = shimkit.metal.metal_kernel``), torch tensors otherwise.

>>> kernel = metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
...                       source="uint i = thread_position_in_grid.x; out[i] = metal::exp(inp[i]);")
>>> kernel(inputs=[torch.zeros(4)], grid=(4, 1, 1), threadgroup=(256, 1, 1),
...        output_shapes=[(4,)], output_dtypes=[torch.float32])[0]
tensor([1., 1., 1., 1.])
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Sequence

import torch

from shimkit.metal.library import compile_shader

# Fewer elements than this and MLX passes an input in the constant address space.
MAX_CONSTANT_ARRAY_SIZE = 8
# MLX's metal type names for each dtype, and what MLX's own utils header makes them mean.
MLX_TYPE_NAMES = {torch.bool: "bool", torch.uint8: "uint8_t", torch.uint16: "uint16_t", torch.uint32: "uint32_t",
                  torch.uint64: "uint64_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int32_t",
                  torch.int64: "int64_t", torch.float16: "float16_t", torch.bfloat16: "bfloat16_t",
                  torch.float32: "float"}
PRELUDE = """#include <metal_stdlib>
using namespace metal;
typedef half float16_t;
typedef bfloat bfloat16_t;
"""
# Every attribute MLX declares when its name occurs in the source, with its type (MLX's table).
THREAD_ATTRIBUTES = (
    ("dispatch_quadgroups_per_threadgroup", "uint"), ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"), ("grid_origin", "uint3"), ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"), ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"), ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"), ("thread_index_in_quadgroup", "uint"), ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"), ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"), ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"), ("threads_per_grid", "uint3"), ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


class MetalKernelError(ValueError):
    """A ``metal_kernel`` call that MLX would refuse: the message names the kernel and the argument."""


def metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                 header: str = "", ensure_row_contiguous: bool = True, atomic_outputs: bool = False,
                 **compile_options: Any) -> "CustomKernel":
    """``mx.fast.metal_kernel`` with MLX's arguments; returns the kernel to call (module docstring)."""
    for role, names in (("input_names", input_names), ("output_names", output_names)):
        for item in names:
            if not isinstance(item, str) or not _IDENTIFIER.match(item):
                raise MetalKernelError(f"[metal_kernel] {name}: {role} entry {item!r} is not an identifier")
    if not output_names:
        raise MetalKernelError("[metal_kernel] Must specify at least one output.")
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise MetalKernelError(f"[metal_kernel] name {name!r} is not an identifier")
    return CustomKernel(name, tuple(input_names), tuple(output_names), source, header, ensure_row_contiguous,
                        atomic_outputs)


class CustomKernel:
    """A kernel made by :func:`metal_kernel`; call it as MLX's (keywords only)."""

    def __init__(self, name: str, input_names: tuple[str, ...], output_names: tuple[str, ...], source: str,
                 header: str, ensure_row_contiguous: bool, atomic_outputs: bool) -> None:
        self.name = name
        self.input_names = input_names
        self.output_names = output_names
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        self._shape_infos = [tuple(f"{n}_{what}" in source for what in ("shape", "strides", "ndim"))
                             for n in input_names]
        self._attributes = [f"  {kind} {attribute} [[{attribute}]]" for attribute, kind in THREAD_ATTRIBUTES
                            if attribute in source]

    def __repr__(self) -> str:
        return f"<shimkit.metal metal_kernel {self.name!r}>"

    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
                 output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
                 template: Sequence[tuple[str, Any]] | None = None, init_value: float | None = None,
                 verbose: bool = False, stream: Any = None) -> list[Any]:
        label = f"[metal_kernel] {self.name}"
        for what, given, expected in (("inputs", inputs, self.input_names),
                                      ("output_shapes", output_shapes, self.output_names),
                                      ("output_dtypes", output_dtypes, self.output_names)):
            if len(given) != len(expected):
                raise MetalKernelError(f"{label}: Expected `{what}` to have size {len(expected)} but got size "
                                       f"{len(given)}.")
        grid3, group3 = _dims(label, "grid", grid), _dims(label, "threadgroup", threadgroup)
        if math.prod(group3) > 1024:
            raise MetalKernelError(f"{label}: Thread group size ({math.prod(group3)}) is greater than the maximum "
                                   f"allowed threads per threadgroup (1024).")
        returns_mlx = any(_is_mlx_array(x) for x in inputs)
        tensors = [_as_tensor(label, n, x) for n, x in zip(self.input_names, inputs)]
        dtypes = [_as_dtype(label, f"output_dtypes[{i}]", d) for i, d in enumerate(output_dtypes)]
        template_args = [_template_argument(label, k, v) for k, v in (template or ())]
        kernel_name = self._kernel_name(tensors, dtypes, template_args)
        generated = self._source(kernel_name, tensors, dtypes, template_args)
        if verbose:
            print(f"Generated source code for `{self.name}`:\n```\n{generated}\n```", file=sys.stdout)
        outputs = [torch.full(tuple(shape), init_value, dtype=d) if init_value is not None
                   else torch.empty(tuple(shape), dtype=d) for shape, d in zip(output_shapes, dtypes)]
        arguments: list[Any] = []
        for tensor, (has_shape, has_strides, has_ndim) in zip(tensors, self._shape_infos):
            arguments.append(self._buffer(tensor))
            if tensor.dim() > 0:
                if has_shape:
                    arguments.append(torch.tensor(tensor.shape, dtype=torch.int32))
                if has_strides:
                    strides = tensor.stride() if not self.ensure_row_contiguous else tensor.contiguous().stride()
                    arguments.append(torch.tensor(strides, dtype=torch.int64))
                if has_ndim:
                    arguments.append(torch.tensor(tensor.dim(), dtype=torch.int32))
        arguments += outputs
        if math.prod(grid3) > 0:
            library = compile_shader(generated)
            getattr(library, kernel_name)(*arguments, threads=grid3,
                                          group_size=tuple(min(t, g) for t, g in zip(group3, grid3)))
        return [_from_torch(o) for o in outputs] if returns_mlx else outputs

    def _buffer(self, tensor: torch.Tensor) -> torch.Tensor:
        """The memory MLX binds: a row-contiguous copy, or with ``ensure_row_contiguous=False`` the
        tensor's own elements from its first one on (the kernel indexes them with ``_strides``)."""
        if self.ensure_row_contiguous or tensor.is_contiguous() or tensor.dim() == 0:
            return tensor.contiguous()
        if any(s < 0 for s in tensor.stride()):
            raise MetalKernelError(f"[metal_kernel] {self.name}: negative strides cannot be bound as a buffer")
        span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        return tensor.as_strided((span if tensor.numel() else 0,), (1,))

    def _kernel_name(self, tensors: list[torch.Tensor], dtypes: list[torch.dtype],
                     template_args: list[tuple[str, str, str]]) -> str:
        name = f"custom_kernel_{self.name}"
        if template_args:  # MLX's: "<float, 4>" with "<", ">" and ", " made "_", the last dropped
            name += "__" + "_".join(value for _, _, value in template_args)
        for tensor in tensors:
            suffix = "s" if tensor.dim() == 0 else "c" if tensor.numel() < MAX_CONSTANT_ARRAY_SIZE else ""
            name += f"_{MLX_TYPE_NAMES[tensor.dtype]}{suffix}"
        return name + "".join(f"_{MLX_TYPE_NAMES[d]}" for d in dtypes)

    def _source(self, kernel_name: str, tensors: list[torch.Tensor], dtypes: list[torch.dtype],
                template_args: list[tuple[str, str, str]]) -> str:
        lines = [PRELUDE + self.header]
        function = f"__{kernel_name}" if template_args else kernel_name
        if template_args:
            kinds = ", ".join(f"{kind} {k}" for k, kind, _ in template_args)
            lines.append(f"template <{kinds}>")
        parameters = []
        index = 0
        for name, tensor, (has_shape, has_strides, has_ndim) in zip(self.input_names, tensors, self._shape_infos):
            space = "constant" if tensor.numel() < MAX_CONSTANT_ARRAY_SIZE else "device"
            reference = "&" if tensor.dim() == 0 else "*"
            parameters.append(f"  const {space} {MLX_TYPE_NAMES[tensor.dtype]}{reference} {name} [[buffer({index})]]")
            index += 1
            if tensor.dim() > 0:
                for present, declaration in ((has_shape, f"const constant int* {name}_shape"),
                                             (has_strides, f"const constant int64_t* {name}_strides"),
                                             (has_ndim, f"const constant int& {name}_ndim")):
                    if present:
                        parameters.append(f"  {declaration} [[buffer({index})]]")
                        index += 1
        for name, dtype in zip(self.output_names, dtypes):
            element = f"atomic<{MLX_TYPE_NAMES[dtype]}>" if self.atomic_outputs else MLX_TYPE_NAMES[dtype]
            parameters.append(f"  device {element}* {name} [[buffer({index})]]")
            index += 1
        parameters += self._attributes
        lines.append(f"[[kernel]] void {function}(\n" + ",\n".join(parameters) + ") {")
        lines += [self.source, "}"]
        if template_args:
            values = ", ".join(v for _, _, v in template_args)
            lines.append(f'template [[host_name("{kernel_name}")]] [[kernel]] decltype({function}<{values}>) '
                         f"{function}<{values}>;")
        return "\n".join(lines) + "\n"


def _dims(label: str, what: str, value: Sequence[int]) -> tuple[int, int, int]:
    dims = tuple(value)
    if len(dims) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise MetalKernelError(f"{label}: `{what}` must be three non-negative ints, got {value!r}")
    return dims  # type: ignore[return-value]


def _is_mlx_array(value: Any) -> bool:
    return type(value).__module__.startswith("mlx") and hasattr(value, "dtype") and hasattr(value, "shape")


def _as_tensor(label: str, name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    elif isinstance(value, bool):
        tensor = torch.tensor(value, dtype=torch.bool)
    elif isinstance(value, int):
        tensor = torch.tensor(value, dtype=torch.int32)
    elif isinstance(value, float):
        tensor = torch.tensor(value, dtype=torch.float32)
    elif _is_mlx_array(value):
        tensor = _from_mlx(value)
    elif hasattr(value, "__array__"):
        import numpy as np

        tensor = torch.from_numpy(np.asarray(value))
    else:
        raise MetalKernelError(f"{label}: input {name!r} is a {type(value).__name__}, not an array or a scalar")
    if tensor.device.type != "cpu":
        raise MetalKernelError(f"{label}: input {name!r} is on {tensor.device}; shimkit.metal runs on CPU tensors")
    if tensor.dtype not in MLX_TYPE_NAMES:
        raise MetalKernelError(f"{label}: input {name!r} has dtype {tensor.dtype}, which Metal kernels cannot take")
    return tensor


def _as_dtype(label: str, what: str, dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        result = dtype
    else:
        text = str(dtype).rsplit(".", 1)[-1]
        result = getattr(torch, text, None)
    if not isinstance(result, torch.dtype) or result not in MLX_TYPE_NAMES:
        raise MetalKernelError(f"{label}: {what} {dtype!r} is not a dtype a Metal kernel can write")
    return result


def _template_argument(label: str, name: Any, value: Any) -> tuple[str, str, str]:
    """``(name, kind, value)`` as MLX writes a template argument: a bool as 1/0, an int, a dtype's name."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise MetalKernelError(f"{label}: template parameter name {name!r} is not an identifier")
    if isinstance(value, bool):
        return name, "bool", "1" if value else "0"
    if isinstance(value, int):
        return name, "int", str(value)
    return name, "typename", MLX_TYPE_NAMES[_as_dtype(label, f"template argument {name}", value)]


def _from_mlx(array: Any) -> torch.Tensor:
    import mlx.core as mx
    import numpy as np

    if array.dtype == mx.bfloat16:
        return torch.from_numpy(np.array(array.astype(mx.float32))).to(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _from_torch(tensor: torch.Tensor) -> Any:
    import mlx.core as mx

    if tensor.dtype == torch.bfloat16:
        return mx.array(tensor.float().numpy()).astype(mx.bfloat16)
    return mx.array(tensor.numpy())
