"""Records validate themselves and name the record at fault."""

import re
from pathlib import Path

import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from shimkit.registry import (
    InvalidPluginRecord,
    Kernel,
    OpPlugin,
    PassSpec,
    Shim,
    UnknownOpError,
    canonical_op_name,
    resolve_op,
)


@pytest.mark.parametrize("spelling", [
    torch.ops.aten.split_copy.Tensor,
    exir_ops.edge.aten.split_copy.Tensor,
    "aten::split_copy.Tensor",
    "aten.split_copy.Tensor",
])
def test_every_spelling_of_an_op_is_canonical(spelling):
    assert canonical_op_name(spelling) == "aten::split_copy.Tensor"


def test_packet_and_bare_string_mean_default_overload():
    assert canonical_op_name(torch.ops.aten.addmm) == "aten::addmm.default"
    assert canonical_op_name("aten::addmm") == "aten::addmm.default"
    assert resolve_op("aten::addmm") is torch.ops.aten.addmm.default


@pytest.mark.parametrize("bad", ["addmm", "::addmm", 3, None])
def test_uninterpretable_op_names_are_rejected(bad):
    with pytest.raises(UnknownOpError):
        canonical_op_name(bad)


def test_unregistered_op_cannot_be_resolved():
    with pytest.raises(UnknownOpError, match="not registered"):
        resolve_op("nosuchlib::frobnicate")


HERE = str(Path(__file__).resolve().parent)
KERNEL = Kernel(name="example", directory=str(Path(__file__).resolve().parent / "example_plugin" / "src" /
                                              "shimkit_example_plugin" / "csrc"), runtime_sources=("logaddexp.cpp",))


def shim(**overrides):
    fields = dict(op="aten::mm", device="mps", symbol="aoti_torch_mps_mm_out", provided_by_runtime=True)
    fields.update(overrides)
    return Shim(**fields)


@pytest.mark.parametrize("overrides, message", [
    ({"device": "tpu"}, "device must be one of"),
    ({"symbol": "aoti-torch"}, "C identifier"),
    ({"provided_by_runtime": False}, "exactly one"),
    ({"kernel": KERNEL}, "exactly one"),
    ({"provided_by_runtime": False, "kernel": "/abs/op.mm"}, "must be a Kernel record"),
    ({"provided_by_runtime": False, "kernel": Kernel(name="host_only", directory=HERE)}, "no runtime_sources"),
    ({"c_prototype": "AOTITorchError other(AtenTensorHandle x)"}, "c_prototype must read"),
    ({"c_prototype": "AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle x);"}, "trailing"),
    ({"op": "mylib::fancy", "symbol": "aoti_torch_mps_fancy"}, "needs a c_prototype"),
    ({"recorded_names": ("",)}, "recorded_names"),
])
def test_malformed_shims_are_rejected(overrides, message):
    with pytest.raises(InvalidPluginRecord, match=message):
        shim(**overrides)


def test_shim_names_put_the_symbol_first():
    topk = shim(op="aten::topk", symbol="aoti_torch_mps_topk", recorded_names=("at::_ops::topk::call",))
    assert topk.names == ("aoti_torch_mps_topk", "at::_ops::topk::call")


@pytest.mark.parametrize("fields, message", [
    ({"name": "Bad Name", "ops": ("aten::mm",)}, "name must match"),
    ({"ops": ()}, "non-empty"),
    ({"ops": "aten::mm"}, "non-empty sequence"),
    ({"ops": ("aten::mm",)}, "no shim, decomposition, eliminating pass or generated_on device for aten::mm.default"),
    ({"ops": ("aten::mm",), "generated_on": {"aten::bmm": ("mps",)}}, "generated_on names an op not in ops"),
    ({"ops": ("aten::mm",), "generated_on": {"aten::mm": "mps"}}, r"generated_on\[aten::mm.default\] must be a "
                                                                    "sequence of devices, not one string"),
    ({"ops": ("aten::mm",), "generated_on": {"aten::mm": ("tpu",)}}, "device must be one of"),
    ({"ops": ("aten::mm",), "generated_on": {"aten::mm": ()}}, "names no device"),
    ({"ops": ("aten::mm",), "generated_on": ["aten::mm"]}, "generated_on must be a mapping"),
    ({"ops": ("aten::mm",), "shims": (shim(op="aten::bmm", symbol="aoti_torch_mps_bmm_out"),)},
     "not in ops"),
    ({"ops": ("aten::mm",), "decompositions": {"aten::bmm": torch.bmm}}, "names ops not in ops"),
    ({"ops": ("aten::mm",), "decompositions": {"aten::mm": "torch.mm"}}, "must be callable"),
    ({"ops": ("aten::mm",), "eliminated_by": {"aten::mm": ""}}, "must name a pass"),
    ({"ops": ("aten::mm",), "shims": ("aoti_torch_mps_mm_out",)}, "Shim records"),
])
def test_malformed_op_plugins_name_themselves(fields, message):
    fields = {"name": "broken", **fields}
    with pytest.raises(InvalidPluginRecord, match=message):
        OpPlugin(**fields)


def test_op_plugin_normalises_ops_and_mappings():
    plugin = OpPlugin(name="mm", ops=(torch.ops.aten.mm.default, "aten::mm"),
                      shims=(shim(),), references={torch.ops.aten.mm: torch.mm})
    assert plugin.ops == ("aten::mm.default",)
    assert dict(plugin.references) == {"aten::mm.default": torch.mm}
    assert plugin.devices == ("mps",)
    with pytest.raises(TypeError):
        plugin.references["aten::bmm.default"] = torch.bmm  # frozen


@pytest.mark.parametrize("fields, message", [
    ({"name": "x", "factory": None}, "factory must be callable"),
    ({"name": "x", "factory": print, "stage": "late"}, "stage must be one of"),
    ({"name": "x", "factory": print, "after": "y"}, "not a string"),
    ({"name": "x", "factory": print, "before": ("x",)}, "against itself"),
    ({"name": "x", "factory": print, "devices": ("gpu",)}, "device must be one of"),
])
def test_malformed_pass_specs(fields, message):
    with pytest.raises(InvalidPluginRecord, match=message):
        PassSpec(**fields)


INJECTED = 'x.mm")\nexecute_process(COMMAND touch /tmp/pwned)\n#'


@pytest.mark.parametrize("fields, message", [
    ({"runtime_sources": (INJECTED,)}, "control character"),
    ({"runtime_sources": ("a;b.mm",)}, "control character or ';'"),
    ({"runtime_sources": ("not_here.mm",)}, "does not exist"),
    ({"runtime_sources": (Path(__file__).name,)}, "is not a kernel source"),
    ({"host_sources": ("../escape.cpp",)}, "inside `directory`"),
    ({"host_sources": (str(Path(__file__)),)}, "inside `directory`"),
    ({"directory": "relative/kernel"}, "absolute path"),
    ({"directory": "/definitely/not/here"}, "does not exist"),
    ({"directory": "/tmp/a;b"}, "control character or ';'"),
    ({"name": "my-kernel"}, "C identifier"),
    ({"host_module": "pkg.mod", "host_sources": ("k.cpp",)}, "not both"),
    ({"host_module": "pkg;rm"}, "dotted import name"),
    ({"entry_points": ("f",)}, "there is none"),
    ({"host_module": "pkg.mod", "entry_points": ("f(x)",)}, "must be an identifier"),
])
def test_kernel_records_that_cmake_or_a_build_cannot_take_are_refused(tmp_path, fields, message):
    (tmp_path / "k.cpp").write_text("// kernel\n")
    with pytest.raises(InvalidPluginRecord, match=re.escape(message)) as caught:
        Kernel(**{"name": "k", "directory": str(tmp_path), **fields})
    assert "Kernel" in str(caught.value)


def test_kernel_paths_are_absolute_inside_its_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "k.cpp").write_text("// kernel\n")
    (tmp_path / "k.metal").write_text("// kernel\n")
    kernel = Kernel(name="k", directory=str(tmp_path), runtime_sources=("sub/k.cpp", "k.metal"),
                    host_sources=("sub/k.cpp",), entry_points=("run",))
    assert kernel.runtime_paths == (str(tmp_path / "sub" / "k.cpp"), str(tmp_path / "k.metal"))
    assert kernel.host_paths == (str(tmp_path / "sub" / "k.cpp"),)
    assert shim(provided_by_runtime=False, kernel=kernel).sources == kernel.runtime_paths


@pytest.mark.parametrize("prototype", [
    "AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle x) { system(\"touch /tmp/pwned\"); }",
    "AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle x);\n#include <stdlib.h>\nint y(",
    "AOTITorchError aoti_torch_mps_mm_out(int x) /* */",
])
def test_c_prototypes_that_would_inject_code_are_refused(prototype):
    with pytest.raises(InvalidPluginRecord, match="c_prototype"):
        shim(c_prototype=prototype)


def test_a_custom_op_shim_must_be_named_as_inductor_calls_it():
    """Inductor calls a custom op's c-shim ``aoti_torch_<device>_<op name>``: a plugin that names it anything
    else ships a function no generated wrapper calls, and a wrapper that does not compile."""
    with pytest.raises(InvalidPluginRecord, match=r"Inductor calls the c-shim of custom op mylib::fancy.default "
                                                  r"'aoti_torch_mps_fancy'.*'aoti_torch_mps_mylib_fancy'"):
        shim(op="mylib::fancy", symbol="aoti_torch_mps_mylib_fancy",
             c_prototype="AOTITorchError aoti_torch_mps_mylib_fancy(AtenTensorHandle x)")
    named = shim(op="mylib::fancy.out", device="cuda", symbol="aoti_torch_cuda_fancy",
                 c_prototype="AOTITorchError aoti_torch_cuda_fancy(AtenTensorHandle x)")
    assert named.symbol == "aoti_torch_cuda_fancy"


def test_a_plain_c_prototype_is_accepted():
    proto = "AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle self, int64_t* sizes, AtenTensorHandle* ret)"
    assert shim(c_prototype=proto).c_prototype == proto
