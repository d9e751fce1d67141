"""The stock ExecuTorch backends take their configuration from the registry, reversibly."""

import pytest
import torch
from executorch.backends.aoti.aoti_backend import AotiBackend
from executorch.backends.apple.metal.metal_backend import MetalBackend

from registry_helpers import CLEAN_ENV
from shimkit.integration import PATCHED, device_of, install, registry_backend
from shimkit.backend import new_registry, use_registry


def originals(backend_cls):
    return {name: backend_cls.__dict__.get(name) for name in PATCHED}


@pytest.fixture
def mps_config():
    return new_registry(env=CLEAN_ENV).backend_config("mps")


def test_metal_backend_takes_the_registry_config(mps_config):
    with registry_backend(MetalBackend, mps_config):
        assert MetalBackend.get_supported_fallback_kernels() == dict(mps_config.fallback_kernels)
        # plugin_decompositions applies the table in place: AotiBackend gets none to retrace with.
        assert "plugin_decompositions" in mps_config.pass_names and mps_config.decomposition_table
        assert MetalBackend.get_decomposition_table() == {}
        assert MetalBackend.get_custom_passes([]) == list(mps_config.passes)
        options = MetalBackend.get_aoti_compile_options([])
        # upstream's own options survive; c-shims come from the registry only
        assert options["aot_inductor.link_libtorch"] is False
        assert options["aot_inductor.custom_ops_to_c_shims"] == dict(mps_config.custom_c_shims)


def test_patch_is_undone_on_exit_and_on_error(mps_config):
    before = originals(MetalBackend)
    with pytest.raises(RuntimeError, match="lowering failed"):
        with registry_backend(MetalBackend, mps_config):
            assert originals(MetalBackend) != before
            raise RuntimeError("lowering failed")
    assert originals(MetalBackend) == before
    assert "aoti_torch_mps_addmm_out" in MetalBackend.get_supported_fallback_kernels()


def test_torchao_stand_in_does_not_outlive_the_call(mps_config):
    import sys

    with registry_backend(MetalBackend, mps_config):
        MetalBackend.get_aoti_compile_options([])
    cshim = sys.modules.get("torchao.experimental.ops.mps.cshim")
    assert cshim is None or getattr(cshim, "__file__", None) is not None


def test_install_undo_is_idempotent(mps_config):
    before = originals(MetalBackend)
    installation = install(MetalBackend, mps_config)
    installation.undo()
    installation.undo()
    assert originals(MetalBackend) == before


class CudaLikeBackend(AotiBackend):
    """Stands in for CudaBackend, whose module needs triton (absent from a CPU-only install)."""

    @classmethod
    def get_device_name(cls):
        return "cuda"

    @classmethod
    def get_supported_fallback_kernels(cls):
        return {"aoti_torch_cuda_upstream_only": None}

    @classmethod
    def get_decomposition_table(cls):
        return {}

    @classmethod
    def get_aoti_compile_options(cls, compile_specs):
        return {"max_autotune": False}

    @classmethod
    def get_custom_passes(cls, compile_specs):
        return ["upstream-pass"]


def cuda_backends():
    backends = [CudaLikeBackend]
    try:
        from executorch.backends.cuda.cuda_backend import CudaBackend
    except ImportError:  # executorch's cuda backend imports triton at module level
        return backends
    return backends + [CudaBackend]


@pytest.mark.parametrize("backend_cls", cuda_backends(), ids=lambda c: c.__name__)
def test_cuda_backends_use_the_cuda_device(backend_cls):
    assert device_of(backend_cls) == "cuda" and device_of(MetalBackend) == "mps"
    before = originals(backend_cls)
    upstream_table = backend_cls.get_decomposition_table()
    with use_registry(env=CLEAN_ENV), registry_backend(backend_cls) as config:
        assert config.device == "cuda"
        # ExecuTorch's CUDA runtime kernels come from the cuda-runtime-kernels plugin, not the class.
        assert backend_cls.get_supported_fallback_kernels() == dict(config.fallback_kernels)
        assert "aoti_torch_cuda_sort_stable" in config.fallback_kernels
        assert "aoti_torch_cuda_upstream_only" not in config.fallback_kernels
        # Triton GEMM templates compile addmm and baddbmm on CUDA (faster there: docs/cuda.md).
        assert torch.ops.aten.addmm.default not in config.decomposition_table
        assert torch.ops.aten.baddbmm.default not in config.decomposition_table
        assert backend_cls.get_decomposition_table() == {}  # applied in place by plugin_decompositions
        passes = backend_cls.get_custom_passes([])
        assert [type(p) for p in passes] == [type(p) for p in config.passes]
        (in_place,) = [p for name, p in zip(config.pass_names, passes) if name == "plugin_decompositions"]
        # upstream's own decompositions (CudaBackend's conv1d as conv2d) after the plugins'
        assert set(in_place.fallback) == set(upstream_table)
    assert originals(backend_cls) == before


def test_without_the_in_place_pass_the_backend_applies_the_table():
    config = new_registry(env={**CLEAN_ENV, "SHIMKIT_BLOCK_PLUGINS": "plugin_decompositions"}).backend_config("mps")
    assert "plugin_decompositions" not in config.pass_names and config.decomposition_table
    with registry_backend(MetalBackend, config):
        assert MetalBackend.get_decomposition_table() == dict(config.decomposition_table)


class CudaWithOwnTable(CudaLikeBackend):
    """CudaBackend's own table: conv1d as conv2d, for its Triton convolution templates."""

    @classmethod
    def get_decomposition_table(cls):
        from torch._inductor.decomposition import conv1d_to_conv2d

        return {torch.ops.aten.conv1d.default: conv1d_to_conv2d}


class TwoConvolutions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pointwise = torch.nn.Conv1d(8, 8, 1)
        self.depthwise = torch.nn.Conv1d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        return self.depthwise(self.pointwise(x))


def conv1d_program():
    return torch.export.export(TwoConvolutions().eval(), (torch.randn(2, 8, 16),))


def call_targets(graph_module):
    return {str(node.target) for node in graph_module.graph.nodes if node.op == "call_function"}


def test_the_backends_own_decompositions_apply_to_what_no_plugin_takes():
    program = conv1d_program()
    expected = program.module()(torch.ones(2, 8, 16))
    assert "aten.conv1d.default" in call_targets(program.graph_module)
    with use_registry(env=CLEAN_ENV), registry_backend(CudaWithOwnTable) as config:
        # Both tables are applied in place: none is left for AotiBackend to retrace the program with.
        assert CudaWithOwnTable.get_decomposition_table() == {}
        (in_place,) = [p for name, p in zip(config.pass_names, CudaWithOwnTable.get_custom_passes([]))
                       if name == "plugin_decompositions"]
        in_place(program.graph_module)
    targets = call_targets(program.graph_module)
    # The grouped-conv1d plugin writes out the depthwise one and declines the pointwise one, which
    # upstream's conv1d_to_conv2d then takes, as stock CudaBackend would: one 2-D convolution is left.
    assert "aten.conv1d.default" not in targets and "aten.mul.Tensor" in targets
    (convolution,) = [n for n in program.graph_module.graph.nodes
                      if n.target is torch.ops.aten.convolution.default]
    assert convolution.args[1].meta["val"].shape == (8, 8, 1, 1) and convolution.args[8] == 1
    torch.testing.assert_close(program.module()(torch.ones(2, 8, 16)), expected)


def test_without_the_in_place_pass_the_backend_keeps_its_own_table():
    config = new_registry(env={**CLEAN_ENV, "SHIMKIT_BLOCK_PLUGINS": "plugin_decompositions"}).backend_config("cuda")
    with registry_backend(CudaWithOwnTable, config):
        table = CudaWithOwnTable.get_decomposition_table()
    # The plugin's entry wins for conv1d (it declines the ungrouped ones); upstream's are all kept otherwise.
    assert table == {**CudaWithOwnTable.get_decomposition_table(), **config.decomposition_table}
    assert torch.ops.aten.conv1d.default in table
