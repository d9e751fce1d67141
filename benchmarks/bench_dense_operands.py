"""What ``dense_operands`` costs (issue 66 part 4): the generated Metal programs of the zoo's CNNs, before and after.

    .venv/bin/python benchmarks/bench_dense_operands.py [--dump DIR] [MODEL ...]

A plugin's ``Shim.dense_operands`` makes ``shimkit.backend.inductor_options`` turn Inductor's layout optimisation
off for programs with a convolution and add the last post-grad pass ``shimkit.passes.dense_operands``, which hands
each operand a shim reads through ``sizes()`` alone through ``prims.inductor_force_stride_order`` (docs/metal.md,
"The stand-in and upstream"). Each model is audited twice with shimkit's registry config and ``--execute``
numerics: **before**, the derivation switched off the way tests/test_metal_upstream_runtime.py's mutants switch
it off (``shimkit.backend._LAID_OUT_BY_INDUCTOR`` emptied and ``shimkit.backend.dense_operands`` returning
``{}``), and **after**, as shipped. The C++ wrapper AOTInductor generates for each delegate is taken where the
audit hands it to ``shimkit.audit.numerics.executed_programs``, and read statically (its ``run_impl``):

* ``disp``: Metal kernel dispatches, the ``aoti_torch_mps_dispatch_*`` calls;
* ``copy``: of those, dispatches of a pure copy kernel (one load, one store, nothing computed: a layout change);
* ``fallb``: fallback c-shim calls (``aoti_torch_mps_convolution``, ``aoti_torch_mps_mm_out`` ...; the per-op
  counts are listed below the table);
* ``alloc``: bytes of the intermediate buffers ``aoti_torch_empty_strided`` allocates (numel x element size, as
  upstream's memory.cpp allocates them), and ``shim-out`` the bytes of the results a fallback allocates itself
  (``&bufN_handle``: the convolution's), sized from the ``assert_size_stride`` that follows the call;
* ``moved``: bytes handed to the dispatches and fallback calls, summed over every call: for each tensor it is
  handed (``set_arg_tensor``, or a fallback's tensor argument, its result included), the bytes of its sizes
  (numel x element size; a ``reinterpret_tensor`` view counts its own sizes). Every handle is sized from the
  wrapper itself: intermediates from ``empty_strided``, views from ``reinterpret_tensor``, the program's inputs
  from their ``assert_size_stride`` and expected dtype, constants (the model's parameters and buffers) from
  ``constants_info_``; a handle the reader cannot size is counted in ``unsized`` and left out of ``moved``. It
  is an estimate of traffic: a kernel that reads an operand once per output element (a broadcast bias) counts
  it once, and what a fallback reads inside (MPSGraph's own copies) is not seen;
* ``verdict`` and ``wall``: the audit's verdict with ``--execute`` and its wall seconds (export, lowering,
  compiling the wrapper with shimkit's Metal runtime, running it and eager).

A warm-up audit first pays the process's imports and the runtime's build. Ratios are after / before. The mm
example is ``torch.mm(x.t(), w) * 2.0`` (tests/test_metal_upstream_runtime.py's ``TransposedSelf``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Iterator

import torch

import shimkit.audit.numerics as numerics_check
import shimkit.backend
from shimkit.audit.loader import LoadedModel, load_model
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import get_registry

CNNS = ("mobilenet_v3_small", "mobilenet_v2", "yolo_neck_head", "conformer_block")
MM_EXAMPLE = "mm_transposed_self"

ELEMENT_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
                 "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1,
                 "bool": 1, "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4, "uint64": 8}
# Calls of run_impl that are the program's own machinery, not a fallback kernel.
MACHINERY = {"aoti_torch_empty_strided", "aoti_torch_mps_set_arg_tensor", "aoti_torch_mps_set_arg_int",
             "aoti_torch_mps_start_encoding", "aoti_torch_mps_run_command_block", "aoti_torch_mps_shared_callback",
             "aoti_torch_clone_preserve_strides", "aoti_torch_get_dtype", "aoti_torch_mps_get_kernel_function",
             "aoti_torch_mps_create_shader_library", "aoti_torch_mps_delete_shader_library"}


class TransposedSelf(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x.t(), self.weight) * 2.0


def load(name: str) -> LoadedModel:
    if name != MM_EXAMPLE:
        return load_model(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LoadedModel(name, model=TransposedSelf(), example_inputs=(torch.randn(6, 4),))


@contextlib.contextmanager
def derivation_off() -> Iterator[None]:
    """As tests/test_metal_upstream_runtime.py's mutants: no layout-optimisation switch, no ContiguousOperands pass."""
    saved = shimkit.backend._LAID_OUT_BY_INDUCTOR, shimkit.backend.dense_operands
    shimkit.backend._LAID_OUT_BY_INDUCTOR = frozenset()
    shimkit.backend.dense_operands = lambda config: {}
    try:
        yield
    finally:
        shimkit.backend._LAID_OUT_BY_INDUCTOR, shimkit.backend.dense_operands = saved


@contextlib.contextmanager
def capturing_wrappers(into: list[str]) -> Iterator[None]:
    original = numerics_check.executed_programs

    def executed_programs(wrapper_sources, graphs, config):
        into.extend(wrapper_sources)
        return original(wrapper_sources, graphs, config)

    numerics_check.executed_programs = executed_programs
    try:
        yield
    finally:
        numerics_check.executed_programs = original


# ---------------------------------------------------------------------------------------------------------------
# Reading a generated wrapper

@dataclass
class Tensor:
    sizes: tuple[int, ...] | None
    dtype: str | None

    @property
    def nbytes(self) -> int | None:
        if self.sizes is None or self.dtype not in ELEMENT_BYTES:
            return None
        return math.prod(self.sizes) * ELEMENT_BYTES[self.dtype]


@dataclass
class Program:
    dispatches: int = 0
    copy_dispatches: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    allocated: int = 0  # empty_strided
    shim_allocated: int = 0  # results a fallback allocates (&bufN_handle)
    moved: int = 0
    unsized: int = 0  # handles handed to a call whose size the reader could not tell

    def __iadd__(self, other: "Program") -> "Program":
        for name in ("dispatches", "copy_dispatches", "allocated", "shim_allocated", "moved", "unsized"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for op, n in other.fallbacks.items():
            self.fallbacks[op] = self.fallbacks.get(op, 0) + n
        return self

    @property
    def fallback_calls(self) -> int:
        return sum(self.fallbacks.values())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"-?\d+", text))


def _split_arguments(text: str) -> list[str]:
    """Top-level comma-separated arguments (``std::array<int64_t, 2>{...}`` kept whole)."""
    text = re.sub(r"std::array<[^>]*>", "std::array", text)
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if current:
        parts.append("".join(current).strip())
    return parts


def _call_arguments(text: str, start: int) -> tuple[str, int]:
    """The text between the parenthesis at ``start`` and its match, and the index after the match."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:index], index + 1
    raise ValueError("unbalanced call")


def _is_copy_kernel(source: str) -> bool:
    """One load, one store of it, no arithmetic: a layout change."""
    kernel = source[source.rfind("kernel void"):]
    body = kernel[kernel.find("{") + 1:kernel.rfind("}")]
    temporaries = re.findall(r"auto (tmp\d+) = ([^;]*);", body)
    stores = re.findall(r"out_ptr\d+\[[^\]]*\] = ([^;]*);", body)
    if len(temporaries) != 1 or len(stores) != 1:
        return False
    name, value = temporaries[0]
    return (re.fullmatch(r"in_ptr\d+\[[^\]]*\]", value.strip()) is not None
            and re.fullmatch(rf"(static_cast<\w+>\()?{name}\)?", stores[0].strip()) is not None)


def read_wrapper(source: str) -> Program:
    program = Program()
    start = source.index("void AOTInductorModel::run_impl(")
    run = source[start:source.index("} // AOTInductorModel::run_impl", start)]
    # The misaligned-input branch runs only for inputs the caller did not align: not the program's own work.
    run = re.sub(r"if \(\(reinterpret_cast<std::uintptr_t>.*?\n    \}\n", "", run, flags=re.S)

    copy_libs = {int(n) for n, text in re.findall(r'const char\* mps_lib_(\d+)_source = \(R"MTL\((.*?)\)MTL"\);',
                                                  source, re.S) if _is_copy_kernel(text)}
    arrays = {name: _ints(values) for name, values in
              re.findall(r"static constexpr int64_t (int_array_\d+)\[\] = \{([^}]*)\};", source)}
    tensors: dict[str, Tensor] = {}

    # Constants: `auto& name = constants_->at(i);`, sized by constants_info_[i].
    info: dict[int, dict[str, str]] = {}
    for index, key, value in re.findall(r"constants_info_\[(\d+)\]\.(\w+) = ([^;]*);", source):
        info.setdefault(int(index), {})[key] = value
    for name, index in re.findall(r"auto& (\w+) = constants_->at\((\d+)\);", run):
        entry = info.get(int(index), {})
        dtype = re.search(r"cached_torch_dtype_(\w+)", entry.get("dtype", ""))
        sizes = _ints(entry["shape"]) if "shape" in entry else None
        tensors[name] = Tensor(sizes, dtype.group(1) if dtype else None)
    # Inputs: `auto argN = std::move(inputs[i]);`, their sizes asserted and their dtype expected.
    for name in re.findall(r"auto (\w+) = std::move\(inputs\[\d+\]\);", run):
        dtype = re.search(rf"{name}_expected_dtype = aoti_torch_dtype_(\w+)\(\)", source)
        tensors[name] = Tensor(None, dtype.group(1) if dtype else None)

    def size_of(argument: str) -> int | None:
        argument = argument.strip()
        view = re.fullmatch(r"(?:wrap_with_raii_handle_if_needed\()?reinterpret_tensor_wrapper\((\w+), \d+, "
                            r"(int_array_\d+), (int_array_\d+), [^)]*\)\)?", argument)
        if view:
            base = tensors.get(view.group(1))
            return Tensor(arrays.get(view.group(2)), base.dtype if base else None).nbytes
        tensor = tensors.get(argument)
        return tensor.nbytes if tensor else None

    def hand(arguments: list[str]) -> None:
        for argument in arguments:
            size = size_of(argument)
            if size is None:
                program.unsized += 1
            else:
                program.moved += size

    lambdas = {}
    for match in re.finditer(r"auto (mps_lib_(\d+)_lambda_\d+) = \[&\]\(AOTIMetalKernelFunctionHandle handle\) \{"
                             r"(.*?)\n    \};", run, re.S):
        lambdas[match.group(1)] = (int(match.group(2)), match.group(3))
    wrappers = dict(re.findall(r"(mps_lib_\d+_func_wrapper_\d+) = (mps_lib_\d+_lambda_\d+);", run))
    run = re.sub(r"auto mps_lib_\d+_lambda_\d+ = \[&\].*?\n    \};", "", run, flags=re.S)  # run where called

    # Walk run_impl's statements in order (the lambdas' bodies run where their command block runs).
    pending_results: dict[str, str] = {}  # bufN -> the fallback that allocated it, until its assert sizes it
    for line in run.splitlines():
        line = line.strip()
        if m := re.search(r"if \(_check_aoti_runtime_check_inputs_env\(\)\) \{ assert_size_stride\((\w+), "
                          r"\{([^}]*)\}", line):
            name, sizes = m.group(1), _ints(m.group(2))
            if name in tensors and tensors[name].sizes is None:
                tensors[name].sizes = sizes
            elif name in pending_results:
                dtype = pending_results.pop(name)
                tensors[name] = Tensor(sizes, dtype)
                program.shim_allocated += tensors[name].nbytes or 0
                program.moved += tensors[name].nbytes or 0  # the result the fallback was handed
            continue
        if m := re.search(r"aoti_torch_empty_strided\(\d+, (int_array_\d+), int_array_\d+, "
                          r"cached_torch_dtype_(\w+), [^&]*&(\w+)_handle\)", line):
            tensors[m.group(3)] = Tensor(arrays.get(m.group(1)), m.group(2))
            program.allocated += tensors[m.group(3)].nbytes or 0
            continue
        if m := re.match(r"auto (\w+) = (.*?);\s*(\w+\.reset\(\);)?\s*// (reuse|alias)", line):
            name, expression = m.group(1), m.group(2)
            if moved := re.fullmatch(r"std::move\((\w+)\)", expression):
                tensors[name] = tensors.get(moved.group(1), Tensor(None, None))
            elif view := re.search(r"reinterpret_tensor_wrapper\((\w+), \d+, (int_array_\d+)", expression):
                base = tensors.get(view.group(1))
                tensors[name] = Tensor(arrays.get(view.group(2)), base.dtype if base else None)
            continue
        if m := re.search(r"aoti_torch_mps_run_command_block\(get_mps_lib_(\d+)_handle\(\), "
                          r"aoti_torch_mps_shared_callback, &(\w+)\)", line):
            lib, body = lambdas[wrappers[m.group(2)]]
            count = len(re.findall(r"aoti_torch_mps_dispatch_\w+\(", body))
            program.dispatches += count
            if lib in copy_libs:
                program.copy_dispatches += count
            hand(re.findall(r"aoti_torch_mps_set_arg_tensor\(handle, \d+, ([^;]*)\);", body))
            continue
        for m in re.finditer(r"\b(aoti_torch_\w+)\(", line):
            name = m.group(1)
            if name in MACHINERY or name.startswith("aoti_torch_mps_dispatch"):
                continue
            arguments, _ = _call_arguments(line, m.end() - 1)
            program.fallbacks[name] = program.fallbacks.get(name, 0) + 1
            handed = []
            for argument in _split_arguments(arguments):
                if result := re.fullmatch(r"&(\w+)_handle", argument):
                    first = next((tensors[a] for a in _split_arguments(arguments) if a in tensors), None)
                    pending_results[result.group(1)] = first.dtype if first else None
                elif re.fullmatch(r"[A-Za-z_]\w*", argument) and argument not in ("nullptr", "true", "false") \
                        or "reinterpret_tensor_wrapper" in argument:
                    handed.append(argument)
            hand(handed)
            break  # one fallback per statement
    program.unsized += len(pending_results)  # results never sized
    return program


# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Variant:
    program: Program
    delegates: int
    verdict: str
    wall: float
    note: str = ""


def measure(name: str, config, dump: str | None, variant: str) -> Variant:
    loaded = load(name)
    sources: list[str] = []
    started = time.perf_counter()
    with contextlib.ExitStack() as scope:
        if variant == "before":
            scope.enter_context(derivation_off())
        scope.enter_context(capturing_wrappers(sources))
        audit = audit_loaded(loaded, config=config, options=AuditOptions(numerics="execute"))
    wall = time.perf_counter() - started
    program = Program()
    for index, source in enumerate(sources):
        program += read_wrapper(source)
        if dump:
            with open(os.path.join(dump, f"{name}.{variant}.{index}.cpp"), "w") as handle:
                handle.write(source)
    note = ""
    if audit.numerics is not None:
        errors = [c.error for c in audit.numerics.checks if getattr(c, "error", None)]
        note = errors[0] if errors else (audit.numerics.unavailable or "")
    if audit.failure:
        note = str(audit.failure)
    return Variant(program, len(sources), audit.status, wall, note)


def _ratio(after: float, before: float) -> str:
    return f"{after / before:.2f}x" if before else ("=" if after == before else "new")


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f}M" if value >= 2**16 else f"{value}B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help=f"zoo models or {MM_EXAMPLE} (default: {', '.join(CNNS)}, "
                                                  f"{MM_EXAMPLE})")
    parser.add_argument("--dump", metavar="DIR", help="write each generated wrapper to DIR/MODEL.VARIANT.N.cpp")
    args = parser.parse_args()
    models = args.models or [*CNNS, MM_EXAMPLE]
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")

    config = get_registry().backend_config("mps")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch {torch.__version__}",
          flush=True)
    started = time.perf_counter()
    audit_loaded(load(MM_EXAMPLE), config=config, options=AuditOptions(numerics="execute"))
    print(f"warm-up ({MM_EXAMPLE}, first audit in the process): {time.perf_counter() - started:.2f} s", flush=True)

    results: dict[str, dict[str, Variant]] = {}
    for name in models:
        results[name] = {variant: measure(name, config, args.dump, variant) for variant in ("before", "after")}
        print(f"  {name}: " + ", ".join(f"{v} {r.verdict} {r.wall:.1f} s" for v, r in results[name].items()),
              flush=True)

    columns = ("disp", "copy", "fallb", "alloc", "shim-out", "moved", "unsized", "verdict", "wall s")
    width = max(map(len, models)) + 2

    def cells(v: Variant) -> list[str]:
        p = v.program
        return [str(p.dispatches), str(p.copy_dispatches), str(p.fallback_calls), _mib(p.allocated),
                _mib(p.shim_allocated), _mib(p.moved), str(p.unsized), v.verdict, f"{v.wall:.1f}"]

    print()
    print(f"{'model':<{width}}{'':<8}" + "".join(f"{c:>10}" for c in columns))
    for name in models:
        before, after = results[name]["before"], results[name]["after"]
        for label, variant in (("before", before), ("after", after)):
            print(f"{name if label == 'before' else '':<{width}}{label:<8}"
                  + "".join(f"{c:>10}" for c in cells(variant)))
        b, a = before.program, after.program
        ratios = [_ratio(a.dispatches, b.dispatches), f"{a.copy_dispatches - b.copy_dispatches:+d}",
                  _ratio(a.fallback_calls, b.fallback_calls), _ratio(a.allocated, b.allocated),
                  _ratio(a.shim_allocated, b.shim_allocated), _ratio(a.moved, b.moved), "", "",
                  _ratio(after.wall, before.wall)]
        print(f"{'':<{width}}{'ratio':<8}" + "".join(f"{c:>10}" for c in ratios))
    print("(ratio: after / before; for copy, the dispatches added)")
    print()
    print("fallback calls, before -> after:")
    for name in models:
        before, after = results[name]["before"].program, results[name]["after"].program
        ops = sorted(set(before.fallbacks) | set(after.fallbacks))
        print(f"  {name}: " + ", ".join(f"{op.removeprefix('aoti_torch_')} {before.fallbacks.get(op, 0)} -> "
                                       f"{after.fallbacks.get(op, 0)}" for op in ops))
    notes = [(name, v, r.note) for name in models for v, r in results[name].items() if r.verdict != "clean"]
    if notes:
        print()
        for name, variant, note in notes:
            print(f"{name} {variant}: {note[:300]}")
    print()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
