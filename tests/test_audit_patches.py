"""Every patch the audit makes is scoped: after the audit — also after one that failed inside the
lowering — each patched attribute is the very object it was before."""

import sys

import pytest
import torch
import torch._inductor
import torch._inductor.codecache
import torch._inductor.fx_passes.joint_graph
import torch._inductor.graph
from executorch.backends.aoti import aoti_backend
from executorch.backends.apple.metal.metal_backend import MetalBackend
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._subclasses.functional_tensor import FunctionalTensor
from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder

from shimkit.audit import audit_loaded, fake_mps_lowering, load_model
from shimkit._patching import TORCHAO_MPS_CSHIM

MISSING = object()
SDPA_NAME = "aten::scaled_dot_product_attention"

PATCHED = [
    (MetalBackend, "move_program_to_device"),
    (aoti_backend.AotiBackend, "preprocess"),
    (torch._inductor.fx_passes.joint_graph, "lazy_init"),
    (torch._inductor.codecache.AotCodeCompiler, "compile"),
    (torch._inductor.graph.GraphLowering, "get_attr"),
    (torch._inductor.graph.GraphLowering, "codegen"),
    (torch._inductor.graph, "is_same_tensor"),
    (torch.backends.mps, "get_core_count"),
    (torch.backends.mps, "is_available"),
    (torch.mps, "is_available"),
    (torch.cuda, "is_available"),
    (torch._subclasses.FakeTensor, "__getitem__"),
    (torch._subclasses.FakeTensor, "__setitem__"),
    (torch._subclasses.FakeTensor, "contiguous"),
    (torch._subclasses.FakeTensor, "to"),
    (torch._subclasses.FakeTensor, "copy_"),
    (torch._subclasses.FakeTensor, "__invert__"),
    (torch._subclasses.FakeTensor, "item"),
    (torch._subclasses.FakeTensor, "tolist"),
    *((FunctionalTensor, name) for name in ("__getitem__", "__setitem__", "contiguous", "to", "copy_", "__invert__")),
    (UniformValueConstantFolder, "_deduce_value"),
    (UniformValueConstantFolder, "_add_peephole_patterns"),
    (CppWrapperCpu, "generate_c_shim_extern_kernel_call"),
    (CppWrapperCpu, "generate_fallback_kernel_with_runtime_lookup_aot"),
    (torch._inductor, "aot_compile"),
    (torch.fx.Interpreter, "run_node"),
]


def _snapshot():
    state = {(owner, name): vars(owner).get(name, MISSING) for owner, name in PATCHED}
    state[("dispatch table", "sdpa")] = torch._C._dispatch_dump_table(SDPA_NAME)
    state[("sys.modules", TORCHAO_MPS_CSHIM)] = sys.modules.get(TORCHAO_MPS_CSHIM, MISSING)
    return state


def _assert_restored(before):
    after = _snapshot()
    changed = [key for key in before if after[key] != before[key]]
    assert not changed, f"not restored: {changed}"


def test_fake_mps_scope_restores_everything_after_an_error():
    before = _snapshot()
    with pytest.raises(RuntimeError, match="boom"):
        with fake_mps_lowering() as session:
            touched = {(owner, name) for owner, name, _ in session.patches.applied
                       if isinstance(name, str) and not isinstance(owner, dict)}
            raise RuntimeError("boom")
    _assert_restored(before)
    # The list above must cover what the scope patches, or this test would check too little.
    assert touched <= set(PATCHED)


def test_audit_restores_everything_after_a_failure_inside_lowering(monkeypatch):
    class FailingViewPass:
        def __call__(self, graph_module):
            raise RuntimeError("injected failure in a backend pass")

    monkeypatch.setattr(aoti_backend, "ReplaceViewCopyWithViewPass", FailingViewPass)
    before = _snapshot()

    audit = audit_loaded(load_model("seed_split_linear"), config=None)

    _assert_restored(before)
    assert audit.status == "error"
    assert audit.failure.phase == "backend_passes"
    assert "injected failure in a backend pass" in audit.failure.message


@torch.library.custom_op("shimkit_audit_test::keep_all", mutates_args=())
def keep_all(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@keep_all.register_fake
def _keep_all_fake(x):
    # Indexing with a bool scalar is legal anywhere, but Python indexing takes a device guard, which
    # a build without MPS cannot give for a fake mps tensor: real work on the fake device.
    return x[..., True].squeeze(-1).clone()


def test_real_work_on_the_fake_device_is_an_audit_limitation_naming_op_and_node(tmp_path):
    model_file = tmp_path / "keep_all.py"
    model_file.write_text(
        "import torch\n"
        "class KeepAll(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.ops.shimkit_audit_test.keep_all(x) * 2\n"
        "def factory():\n"
        "    return KeepAll(), (torch.randn(4),)\n")
    before = _snapshot()

    audit = audit_loaded(load_model(f"{model_file}:factory"), config=None)

    _assert_restored(before)
    assert audit.status == "limitation"
    assert audit.failure.op == "shimkit_audit_test::keep_all.default"
    assert audit.failure.node.source.file == str(model_file)
    assert audit.failure.node.source.line == 4
