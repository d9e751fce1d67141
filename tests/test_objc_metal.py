"""shimkit's Metal and MPSGraph on the CPU (objc/, issue 67), built with AddressSanitizer and UBSan, against torch.

Two programs under tests/objc_programs/: ``metal_runtime.mm`` walks through what torch has no counterpart for
(buffers and storage modes, blits, command buffers and their rules, events, MPSCommandBuffer, MPSNDArray strides
and offsets, the errors MPSGraph raises, the assumed topK order), one line per scenario; ``metal_graph.mm`` runs one
MPSGraph operation per case read from stdin (alternately through runWithFeeds: and through a command buffer into
MPSNDArrays at offsets) and prints the results. Hypothesis draws the cases in batches, one process per batch.

Elementwise operations, casts, shape operations and topK must equal torch bit for bit (float16 and bfloat16 round
once per operation, as torch's CPU kernels do). Matrix products must equal torch computing the stand-in's
assumption (float32 products summed in index order, rounded once to the result type) and lie within that sum's
error bound of torch.matmul in float64; convolutions within the same bound of torch's conv2d in float64.
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.objc.build import compile_objc, sanitizer_environment

PROGRAMS = Path(__file__).parent / "objc_programs"
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.int32: "int32",
         torch.int64: "int64", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}
DTYPES = {name: dtype for dtype, name in NAMES.items()}
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
# MPSGraphPaddingStyle and MPSGraphTensorNamedDataLayout values.
EXPLICIT, TF_VALID, TF_SAME, ONNX_SAME_LOWER = 0, 1, 2, 4
NCHW, NHWC, OIHW, HWIO = 0, 1, 2, 3
BATCHES = settings(max_examples=8, deadline=None)

RUNTIME_SCENARIOS = ("device", "buffers", "buffer_without_copy", "blits_run_at_commit", "command_buffer_rules",
                     "compute_encoder_without_msl", "compile_options", "shared_events", "mps_command_buffer",
                     "graph_outlives_its_tensor_data", "mpsndarray_strides_and_offsets",
                     "graph_through_mpsndarray_offsets", "tensors_and_operations", "graph_rejections",
                     "topk_order_assumed")


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("objc-metal")
    return {name: compile_objc([PROGRAMS / f"{name}.mm"], folder / name, executable=True, sanitize=True)
            for name in ("metal_runtime", "metal_graph")}


def run_clean(program: Path, stdin: str = "") -> str:
    """The program's stdout; it must exit 0 with nothing from a sanitizer."""
    done = subprocess.run([str(program)], input=stdin, capture_output=True, text=True,
                          env=sanitizer_environment(), timeout=300)
    assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stdout[-3000:] + done.stderr[-6000:]
    return done.stdout


# -- metal_runtime ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scenarios(programs) -> dict[str, str]:
    lines = run_clean(programs["metal_runtime"]).splitlines()
    return {line.split()[1].rstrip(":"): line for line in lines if line.startswith(("ok ", "FAIL "))}


@pytest.mark.parametrize("name", RUNTIME_SCENARIOS)
def test_runtime_scenario(scenarios, name):
    assert scenarios.get(name) == f"ok {name}", scenarios.get(name, f"{name} did not run")


def test_every_runtime_scenario_is_listed(scenarios):
    assert sorted(scenarios) == sorted(RUNTIME_SCENARIOS)


# -- metal_graph -----------------------------------------------------------------------------------------------

@dataclass
class Case:
    op: str
    inputs: list[torch.Tensor]

    def text(self) -> str:
        lines = [f"op {self.op}"]
        for tensor in self.inputs:
            lines.append(" ".join(["in", NAMES[tensor.dtype], str(tensor.dim()), *map(str, tensor.shape),
                                   to_bytes(tensor).hex()]))
        return "\n".join([*lines, "run", ""])


def to_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def run_graph(program: Path, cases: list[Case]) -> list[list[torch.Tensor] | str]:
    """Each case's results, or the reason of the NSException it raised."""
    answers: list[list[torch.Tensor] | str] = []
    current: list[torch.Tensor] = []
    for line in run_clean(program, "".join(case.text() for case in cases)).splitlines():
        words = line.split()
        if words[0] == "out":
            rank = int(words[2])
            data = bytes.fromhex(words[3 + rank]) if len(words) > 3 + rank else b""
            current.append(from_bytes(data, DTYPES[words[1]], [int(w) for w in words[3:3 + rank]]))
        elif words[0] == "done":
            answers.append(current)
            current = []
        else:
            answers.append(line.split(" ", 1)[1])
    assert len(answers) == len(cases)
    return answers


def assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{list(got.shape)} != " \
                                                                  f"{want.dtype}{list(want.shape)}"
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def values(seed: int, shape, dtype, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(dtype)
    return torch.randint(-20, 20, shape, generator=generator).to(dtype)


seeds = st.integers(0, 2 ** 31 - 1)
sizes = st.integers(1, 4)


@st.composite
def broadcast_pair(draw):
    """An output shape and two shapes that broadcast to it (leading dimensions dropped, some sizes made 1)."""
    shape = draw(st.lists(sizes, min_size=0, max_size=3))

    def operand():
        kept = shape[draw(st.integers(0, len(shape))):]
        return [1 if draw(st.booleans()) else size for size in kept]

    return operand(), operand()


@st.composite
def binary_cases(draw):
    op = draw(st.sampled_from(["add", "sub", "mul", "div"]))
    dtype = draw(st.sampled_from(FLOATS if op == "div" else (*FLOATS, torch.int32)))
    a_shape, b_shape = draw(broadcast_pair())
    b = values(draw(seeds), b_shape, dtype)
    if op == "div" and draw(st.booleans()) and b.numel():
        b.reshape(-1)[0] = 0  # x / 0 and 0 / 0 as IEEE says
    return Case(op, [values(draw(seeds), a_shape, dtype), b])


TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


@BATCHES
@given(st.lists(binary_cases(), min_size=1, max_size=12))
def test_elementwise_broadcasts_and_rounds_as_torch(programs, cases):
    for case, answer in zip(cases, run_graph(programs["metal_graph"], cases)):
        a, b = case.inputs
        assert_same(answer[0], TORCH_BINARY[case.op](a, b), f"{case.op} {list(a.shape)} {list(b.shape)} {a.dtype}")


@st.composite
def shape_cases(draw):
    dtype = draw(st.sampled_from((*FLOATS, torch.int32)))
    shape = draw(st.lists(sizes, min_size=1, max_size=4))
    x = values(draw(seeds), shape, dtype)
    kind = draw(st.sampled_from(["neg", "transpose", "broadcast", "reshape"]))
    if kind == "transpose":
        first, second = draw(st.integers(-len(shape), len(shape) - 1)), draw(st.integers(-len(shape), len(shape) - 1))
        return Case(f"transpose {first} {second}", [x]), x.transpose(first, second)
    if kind == "broadcast":
        source = [1 if draw(st.booleans()) else size for size in shape[draw(st.integers(0, len(shape) - 1)):]]
        x = values(draw(seeds), source, dtype)
        return Case(f"broadcast {len(shape)} {' '.join(map(str, shape))}", [x]), x.expand(shape)
    if kind == "reshape":
        target = list(reversed(shape))
        inferred = draw(st.integers(-1, len(target) - 1))
        written = [-1 if i == inferred else size for i, size in enumerate(target)]
        return Case(f"reshape {len(written)} {' '.join(map(str, written))}", [x]), x.reshape(target)
    return Case("neg", [x]), -x


@BATCHES
@given(st.lists(shape_cases(), min_size=1, max_size=12))
def test_shape_operations_and_negation_equal_torch(programs, drawn):
    cases = [case for case, _ in drawn]
    for (case, want), answer in zip(drawn, run_graph(programs["metal_graph"], cases)):
        assert_same(answer[0].contiguous(), want.contiguous(), case.op)


CAST_TYPES = (*FLOATS, torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8, torch.bool)


@st.composite
def cast_cases(draw):
    source = draw(st.sampled_from(CAST_TYPES))
    target = draw(st.sampled_from(CAST_TYPES))
    shape = draw(st.lists(sizes, min_size=0, max_size=2))
    generator = torch.Generator().manual_seed(draw(seeds))
    if source.is_floating_point and not target.is_floating_point and target != torch.bool:
        # In every integer type's range: torch's conversion of anything else is undefined behaviour in C++.
        low = 0 if target == torch.uint8 else -100
        x = (torch.rand(shape, generator=generator, dtype=torch.float64) * (100 - low) + low).to(source)
    elif source.is_floating_point:
        # Magnitudes from float16's subnormals to past bfloat16's and float16's ranges, and NaN and infinities.
        scale = torch.exp2(torch.randint(-30, 30, shape, generator=generator).double())
        x = (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(source)
        if x.numel() and draw(st.booleans()):
            x.reshape(-1)[0] = draw(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0]))
    elif source == torch.bool:
        x = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        info = torch.iinfo(source)
        x = torch.randint(max(info.min, -2 ** 40), min(info.max, 2 ** 40), shape, generator=generator,
                          dtype=torch.int64).to(source)
    return Case(f"cast {NAMES[target]}", [x]), x.to(target)


@BATCHES
@given(st.lists(cast_cases(), min_size=1, max_size=16))
def test_casts_round_as_torch(programs, drawn):
    cases = [case for case, _ in drawn]
    for (case, want), answer in zip(drawn, run_graph(programs["metal_graph"], cases)):
        assert_same(answer[0], want, f"{case.inputs[0].dtype} -> {case.op}")


@st.composite
def scale_cases(draw):
    dtype = draw(st.sampled_from(FLOATS))
    x = values(draw(seeds), draw(st.lists(sizes, min_size=0, max_size=3)), dtype)
    # A float32 value: torch rounds a Python scalar to the tensor's type through float32 (exactly, here).
    scalar = draw(st.floats(-1e4, 1e4, width=32, allow_subnormal=False))
    if draw(st.booleans()):
        return Case(f"scale {float(scalar).hex()} scalar", [x]), x * torch.tensor([scalar], dtype=dtype)
    return Case(f"scale {float(scalar).hex()} shaped", [x]), x * torch.full(x.shape, scalar, dtype=dtype)


@BATCHES
@given(st.lists(scale_cases(), min_size=1, max_size=12))
def test_constants_round_to_their_type(programs, drawn):
    cases = [case for case, _ in drawn]
    for (case, want), answer in zip(drawn, run_graph(programs["metal_graph"], cases)):
        assert_same(answer[0], want, case.op)


@st.composite
def topk_cases(draw):
    dtype = draw(st.sampled_from((*FLOATS, torch.int32)))
    shape = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    generator = torch.Generator().manual_seed(draw(seeds))
    # Few distinct values, so that ties (and -0.0 against 0.0) are common.
    x = (torch.randint(-3, 4, shape, generator=generator) * 0.5).to(dtype)
    if dtype.is_floating_point and x.numel() and draw(st.booleans()):
        x.reshape(-1)[0] = -0.0
    return Case(f"topk {draw(st.integers(0, shape[-1]))}", [x])


@BATCHES
@given(st.lists(topk_cases(), min_size=1, max_size=12))
def test_topk_equals_torch_with_ties_lower_index_first(programs, cases):
    for case, answer in zip(cases, run_graph(programs["metal_graph"], cases)):
        x, k = case.inputs[0], int(case.op.split()[1])
        assert_same(answer[0], torch.topk(x, k).values, f"{case.op} values of {x.tolist()}")
        order = torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k].to(torch.int32)
        assert_same(answer[1], order, f"{case.op} indices of {x.tolist()}")


def emulated_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The stand-in's assumption in torch: float32 products summed in index order, rounded once."""
    a32, b32 = a.float(), b.float()
    total = torch.zeros(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))
    for p in range(a.shape[-1]):
        total = total + a32[..., :, p:p + 1] * b32[..., p:p + 1, :]
    return total.to(a.dtype)


@st.composite
def matmul_cases(draw):
    dtype = draw(st.sampled_from(FLOATS))
    m, k, n = draw(sizes), draw(st.integers(1, 9)), draw(sizes)
    a_batch, b_batch = draw(broadcast_pair())
    a = values(draw(seeds), [*a_batch[-2:], m, k], dtype)
    b = values(draw(seeds), [*b_batch[-2:], k, n], dtype)
    return Case("matmul", [a, b])


@BATCHES
@given(st.lists(matmul_cases(), min_size=1, max_size=10))
def test_matmul_accumulates_in_float32_and_rounds_once(programs, cases):
    for case, answer in zip(cases, run_graph(programs["metal_graph"], cases)):
        a, b = case.inputs
        got = answer[0]
        assert_same(got, emulated_matmul(a, b), f"matmul {list(a.shape)} {list(b.shape)} {a.dtype}")
        exact = torch.matmul(a.double(), b.double())
        bound = (a.shape[-1] * 2.0 ** -23 * torch.matmul(a.double().abs(), b.double().abs())
                 + UNIT_ROUNDOFF[a.dtype] * exact.abs() * 1.01)
        assert bool(((got.double() - exact).abs() <= bound).all()), f"matmul beyond its error bound: {case}"


def same_padding(size: int, kernel: int, stride: int, dilation: int, lower: bool) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    small = total // 2
    return (total - small, small) if lower else (small, total - small)


@st.composite
def conv_cases(draw):
    dtype = draw(st.sampled_from(FLOATS))
    groups, per_group, outputs_per_group = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n, height, width = draw(st.integers(1, 2)), draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kernel_h, kernel_w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride_x, stride_y = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dilation_x, dilation_y = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]  # left, right, top, bottom
    style = draw(st.sampled_from([EXPLICIT, TF_VALID, TF_SAME, ONNX_SAME_LOWER]))
    data_layout, weights_layout = draw(st.sampled_from([NCHW, NHWC])), draw(st.sampled_from([OIHW, HWIO]))
    x = values(draw(seeds), [n, groups * per_group, height, width], dtype)
    w = values(draw(seeds), [groups * outputs_per_group, per_group, kernel_h, kernel_w], dtype)
    fed_x = x.permute(0, 2, 3, 1) if data_layout == NHWC else x
    fed_w = w.permute(2, 3, 1, 0) if weights_layout == HWIO else w
    op = (f"conv2d {stride_x} {stride_y} {dilation_x} {dilation_y} {groups} {' '.join(map(str, pads))} {style} "
          f"{data_layout} {weights_layout}")
    if style == TF_VALID:
        pads = [0, 0, 0, 0]
    elif style in (TF_SAME, ONNX_SAME_LOWER):
        lower = style == ONNX_SAME_LOWER
        pads = [*same_padding(width, kernel_w, stride_x, dilation_x, lower),
                *same_padding(height, kernel_h, stride_y, dilation_y, lower)]
    return Case(op, [fed_x.contiguous(), fed_w.contiguous()]), (x, w, pads, data_layout)


@BATCHES
@given(st.lists(conv_cases(), min_size=1, max_size=10))
def test_convolution_matches_torch_conv2d(programs, drawn):
    cases = [case for case, _ in drawn]
    for (case, (x, w, pads, layout)), answer in zip(drawn, run_graph(programs["metal_graph"], cases)):
        fields = [int(v) for v in case.op.split()[1:6]]
        stride, dilation, groups = (fields[1], fields[0]), (fields[3], fields[2]), fields[4]
        padded = F.pad(x.double(), pads)
        fits = all(padded.shape[2 + d] >= dilation[d] * (w.shape[2 + d] - 1) + 1 for d in range(2))
        if not fits:
            assert isinstance(answer, str) and "does not fit" in answer, f"{case.op}: {answer}"
            continue
        exact = F.conv2d(padded, w.double(), stride=stride, dilation=dilation, groups=groups)
        magnitude = F.conv2d(padded.abs(), w.double().abs(), stride=stride, dilation=dilation, groups=groups)
        got = answer[0].permute(0, 3, 1, 2) if layout == NHWC else answer[0]
        assert got.dtype == x.dtype and got.shape == exact.shape, f"{case.op}: shape {list(got.shape)}"
        terms = w.shape[1] * w.shape[2] * w.shape[3]
        bound = terms * 2.0 ** -23 * magnitude + UNIT_ROUNDOFF[x.dtype] * exact.abs() * 1.01 + 2.0 ** -24
        assert bool(((got.double() - exact).abs() <= bound).all()), f"{case.op}: beyond the error bound"


# -- MSL through the shader backend ----------------------------------------------------------------------------

# The program runs in a Python process (the MSL compiler is shimkit.metal's, registered from Python as
# shimkit.runtime.program registers it for a runtime), with the objc framework and the program built with ASan and
# UBSan and clang's ASan runtime preloaded (the interpreter is not instrumented; its leaks are by design, so leak
# detection is off here: tests/objc_programs/metal_runtime.mm's checks cover the framework's own).
SHADER_SCENARIOS = ("architecture", "dispatch_threads_at_commit", "dispatch_threadgroups_with_barriers",
                    "two_dimensional_grid_and_kernel_limit", "compile_errors_and_unknown_functions", "dispatch_rules")
_SHADER_DRIVER = """
import ctypes, sys
from shimkit.runtime.program import _resolver
program = ctypes.CDLL(sys.argv[1])
program.shimkit_runtime_set_resolver(_resolver)
program.shimkit_test_metal_shaders.restype = ctypes.c_size_t
report = ctypes.create_string_buffer(1 << 16)
program.shimkit_test_metal_shaders(report, len(report))
print(report.value.decode())
"""


@pytest.fixture(scope="module")
def shader_scenarios(tmp_path_factory) -> dict[str, str]:
    import os
    import sys

    from shimkit.objc.build import toolchain
    from shimkit.runtime.sources import RUNTIME_DIR
    from shimkit.runtime.upstream import DISPATCH_INCLUDES, DISPATCH_SOURCES

    folder = tmp_path_factory.mktemp("objc-shaders")
    program = compile_objc([PROGRAMS / "metal_shaders.mm", *DISPATCH_SOURCES], folder / "libmetal_shaders.so",
                           sanitize=True, include_dirs=[str(d) for d in DISPATCH_INCLUDES], extra_flags=["-ldl"])
    assert RUNTIME_DIR / "metal_dispatch.cpp" in DISPATCH_SOURCES
    runtime = subprocess.run([toolchain().cxx, "-print-file-name=libclang_rt.asan-x86_64.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    environment = sanitizer_environment()
    environment.update(LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_odr_violation=0")
    done = subprocess.run([sys.executable, "-c", _SHADER_DRIVER, str(program)], capture_output=True, text=True,
                          env=environment, timeout=600, cwd=os.getcwd())
    assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stdout[-3000:] + done.stderr[-6000:]
    return {line.split()[1].rstrip(":"): line for line in done.stdout.splitlines() if line.startswith(("ok ", "FAIL "))}


@pytest.mark.parametrize("name", SHADER_SCENARIOS)
def test_shader_scenario(shader_scenarios, name):
    assert shader_scenarios.get(name) == f"ok {name}", shader_scenarios.get(name, f"{name} did not run")


def test_every_shader_scenario_is_listed(shader_scenarios):
    assert sorted(shader_scenarios) == sorted(SHADER_SCENARIOS)
