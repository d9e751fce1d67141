"""Whole Metal programs on Linux (shimkit.runtime.program, runtime/native): the C++ wrapper AOTInductor
generates for ExecuTorch's MetalBackend, compiled and run on the CPU against eager."""

import ctypes
import re
import textwrap

import pytest
import torch

from shimkit.audit.loader import load_model
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.csrc.build import INCLUDE_DIR
from shimkit.runtime import program

SHIM_MPS = program.torch_include() / "torch" / "csrc" / "inductor" / "aoti_torch" / "c" / "shim_mps.h"


@pytest.fixture(scope="module")
def stock_runtime():
    """The runtime without plugin adapters (what a stock audit links)."""
    path = program.runtime_library(None)
    return program.load_runtime(path)


def test_every_function_of_torchs_mps_abi_is_implemented(stock_runtime):
    declared = sorted(set(re.findall(r"\b(aoti_torch_mps_\w+)\s*\(", SHIM_MPS.read_text())))
    assert len(declared) >= 15, declared  # the header's functions were found
    missing = [name for name in declared if not hasattr(stock_runtime, name)]
    assert not missing, f"torch's shim_mps.h declares {missing}, which runtime/native does not implement"


def _write_model(tmp_path, body):
    path = tmp_path / "model.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


def _execute(spec, *, plugins):
    from shimkit.backend import get_registry

    config = get_registry().backend_config("mps") if plugins else None
    return audit_loaded(load_model(spec), config=config, options=AuditOptions(numerics="execute"))


def test_inductors_reduction_and_elementwise_kernels_run_as_a_whole_program(tmp_path, stock_runtime):
    spec = _write_model(tmp_path, """
        class Model(torch.nn.Module):
            def forward(self, x, y):
                return torch.softmax(x * 2 + y, -1).sum(0), x.cos() + 1

        def make():
            batch = torch.export.Dim("batch", min=1, max=16)
            return Model(), (torch.randn(4, 64), torch.randn(4, 64)), {"x": {0: batch}, "y": {0: batch}}
    """) + ":make"
    before = stock_runtime.shimkit_runtime_live_tensors()
    audit = _execute(spec, plugins=False)
    assert audit.status == "clean", (audit.failure, audit.numerics)
    assert audit.numerics.ran == "program"
    # the example size, both bounds and one past the example: the program is not baked to one size
    assert {tuple(c.sizes.values()) for c in audit.numerics.checks} == {(4,), (1,), (16,), (5,)}
    assert all(max(c.max_errors) < 1e-5 for c in audit.numerics.checks)
    assert stock_runtime.shimkit_runtime_live_tensors() == before  # every output and temporary was freed


def test_a_wrong_kernel_result_is_reported_wrong_naming_the_output(tmp_path, monkeypatch):
    spec = _write_model(tmp_path, """
        class Model(torch.nn.Module):
            def forward(self, x):
                return x.exp(), x.sin()

        def make():
            return Model(), (torch.randn(8, 32),)
    """) + ":make"
    original = program.MetalProgram.__call__

    def second_output_off(self, *inputs):
        outputs = original(self, *inputs)
        return [outputs[0], outputs[1] + 0.5]

    monkeypatch.setattr(program.MetalProgram, "__call__", second_output_off)
    audit = _execute(spec, plugins=False)
    assert audit.status == "wrong"
    assert "output 1" in audit.numerics.checks[0].error


def test_a_missing_symbol_is_named(stock_runtime):
    source = 'extern "C" int aoti_torch_mps_no_such_kernel(); int use() { return aoti_torch_mps_no_such_kernel(); }'
    with pytest.raises(program.Unlinkable, match="aoti_torch_mps_no_such_kernel"):
        program.compile_wrapper(source, program.runtime_library(None))


def test_a_wrapper_that_does_not_compile_names_its_line_and_the_compilers_error(stock_runtime):
    source = ('extern "C" int aoti_torch_mps_two(int a, int b);\n'
              'int use() {\n  return aoti_torch_mps_two(1, 2, nullptr);\n}\n')
    with pytest.raises(program.WrapperDoesNotCompile) as raised:
        program.compile_wrapper(source, program.runtime_library(None))
    message = str(raised.value)
    assert "line 3: too many arguments to function" in message
    assert "    return aoti_torch_mps_two(1, 2, nullptr);" in message


def test_a_wrapper_splits_into_the_interface_every_program_shares_and_its_own_model_unit():
    model = "\n#include <ATen/native/mps/MetalShaderLibrary.h>\nint model_part() { return 1; }\n"
    interface, own = program._split_wrapper(program.MPS_HEADERS + program._INTERFACE + model)
    assert interface == program.interface_unit()  # the same text, so the same (prebuilt) object, for all
    assert own.endswith(model) and program._INTERFACE not in own
    assert own.startswith("#include <torch/csrc/inductor/aoti_include/mps.h>\n")  # every header it had, in order
    assert f"extern template class {program._MODEL_BASE};" in own  # instantiated once, in the interface's unit
    assert program._split_wrapper(model) is None
    assert program._split_wrapper("int x;\n" + program._INTERFACE + model) is None  # code before it: kept whole


def test_a_split_wrapper_that_does_not_compile_names_the_line_of_the_whole_wrapper(stock_runtime):
    prefix = program.MPS_HEADERS + program._INTERFACE
    source = prefix + "int broken() {\n  return shimkit_not_declared;\n}\n"
    with pytest.raises(program.WrapperDoesNotCompile) as raised:
        program.compile_wrapper(source, program.runtime_library(None))
    message = str(raised.value)  # the compiler's quotes are its locale's
    assert f"line {prefix.count(chr(10)) + 2}: " in message and "shimkit_not_declared" in message
    assert "    return shimkit_not_declared;" in message


def test_the_runtime_refuses_handles_it_did_not_make(stock_runtime):
    stranger = ctypes.c_void_p(12345)
    assert stock_runtime.aoti_torch_delete_tensor_object(stranger) != 0
    assert "aoti_torch_delete_tensor_object" in program.take_failure(stock_runtime)
    assert program.take_failure(stock_runtime) == ""  # taken once


def test_tensor_handles_round_trip_strided_tensors(stock_runtime):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base.t()
    handle = program.tensor_handle(stock_runtime, view)
    try:
        copy = program.tensor_from_handle(stock_runtime, handle)
    finally:
        stock_runtime.aoti_torch_delete_tensor_object(handle)
    assert copy.stride() == view.stride()
    assert torch.equal(copy, view)


def test_tensor_handles_are_on_mps_as_the_sdk_header_numbers_it(stock_runtime):
    (mps,) = re.findall(r"constexpr int32_t kMps = (\d+);", (INCLUDE_DIR / "shimkit" / "c10_codes.h").read_text())
    handle = program.tensor_handle(stock_runtime, torch.zeros(2))
    device = ctypes.c_int32()
    try:
        assert stock_runtime.aoti_torch_get_device_type(ctypes.c_void_p(handle), ctypes.byref(device)) == 0
    finally:
        stock_runtime.aoti_torch_delete_tensor_object(handle)
    assert device.value == int(mps)



def _use(*symbols: str) -> str:
    """A wrapper that takes the address of each of ``symbols`` (declared, as a wrapper declares its shims)."""
    declared = "".join(f'extern "C" int {name}();\n' for name in symbols)
    return declared + 'extern "C" void* shimkit_uses[] = {' + ", ".join(f"(void*)&{name}" for name in symbols) + "};\n"


def test_a_programs_runtime_compiles_the_fallbacks_and_plugin_kernels_it_calls_and_no_others():
    from shimkit.backend import get_registry

    config = get_registry().backend_config("mps")
    # A shim the wrapper only declares, as Inductor's wrappers declare every custom op's, is not called.
    declared_only = "AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k);\n"
    runtime = program.load_runtime(program.program_runtime(config, declared_only + _use("aoti_torch_mps_convolution")))
    assert hasattr(runtime, "aoti_torch_mps_convolution") and hasattr(runtime, "aoti_torch_empty_strided")
    for left_out in ("aoti_torch_mps_topk", "aoti_torch_mps_mm_out", "aoti_torch_mps_addmm_out",
                     "aoti_torch_mps_sort_stable", "shimkit_msl_elementwise"):
        assert not hasattr(runtime, left_out), left_out
    with_plugin = program.load_runtime(program.program_runtime(config, _use("aoti_torch_mps_addmm_out")))
    assert hasattr(with_plugin, "aoti_torch_mps_addmm_out") and not hasattr(with_plugin, "aoti_torch_mps_convolution")


def test_a_program_its_runtime_does_not_link_links_against_the_whole_runtime():
    """``aoti_torch_get_size`` comes with the nonzero plugin's kernel, which a wrapper not calling nonzero's
    shim leaves out of its runtime: the program links against the whole runtime instead."""
    from shimkit.backend import get_registry

    config = get_registry().backend_config("mps")
    source = _use("aoti_torch_get_size")
    assert not hasattr(program.load_runtime(program.program_runtime(config, source)), "aoti_torch_get_size")
    runtime_path, path = program._build_side_by_side(source, config)
    assert runtime_path == program.runtime_library(config)
    assert ctypes.CDLL(str(path)).shimkit_uses


CHANNELS_LAST_CONVOLUTIONS = """
    class DepthwiseThenRegular(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.regular = torch.nn.Conv2d(8, 16, 3, padding=1)

        def forward(self, x):
            return self.regular(self.depthwise(x))

    def make():
        torch.manual_seed(0)
        return DepthwiseThenRegular(), (torch.randn(1, 8, 16, 16),)
"""


def test_a_channels_last_convolution_is_wrong_on_the_stock_runtime_as_on_a_mac_and_right_with_shimkit(tmp_path):
    """pytorch/executorch#22951: Inductor's layout optimisation hands aoti_torch_mps_convolution channels-last
    operands, which op_convolution.mm reads as NCHW. shimkit's convolution plugin declares the shim's dense operands,
    from which the backend config keeps them contiguous."""
    spec = _write_model(tmp_path, CHANNELS_LAST_CONVOLUTIONS) + ":make"
    stock = _execute(spec, plugins=False)
    assert stock.status == "wrong", (stock.failure, stock.numerics)
    (check,) = stock.numerics.checks
    for words in ("aoti_torch_mps_convolution reads its channels-last input as a contiguous NCHW buffer",
                  "op_convolution.mm uses only sizes() (pytorch/executorch#22951)",
                  "strides [2048, 1, 128, 8]",  # the buffer
                  "called for node convolution (aten::convolution.default)",
                  "model.py:10 in forward: return self.regular(self.depthwise(x))",
                  "from float64"):  # and the numbers are off too
        assert words in check.error, check.error
    shimkit = _execute(spec, plugins=True)
    assert shimkit.status == "clean", (shimkit.failure, shimkit.numerics)
