"""What the registry derives for a backend, and how it settles conflicts."""

import pytest
import torch
from executorch.backends.apple.metal.metal_backend import MetalBackend

from registry_helpers import CLEAN_ENV, KERNEL_SOURCE, Records, kernel_plugin, registry_with
from shimkit.registry import InvalidPluginRecord, OpPlugin, PassSpec, PluginConflictError
from shimkit.backend import inductor_options, new_registry


def test_derived_fallback_kernels_cover_executorch_metal_backend():
    config = new_registry(env=CLEAN_ENV).backend_config("mps")
    upstream = set(MetalBackend.get_supported_fallback_kernels())
    assert upstream <= set(config.fallback_kernels)


def test_decomposition_applies_only_where_no_shim():
    erfinv_decomposition = lambda x: x  # noqa: E731
    decomposing = OpPlugin(name="erfinv-decomp", ops=("aten::erfinv",),
                           decompositions={"aten::erfinv": erfinv_decomposition})
    registry = registry_with(Records(decomposing))
    config = registry.backend_config("mps")
    # The table entry wraps the decomposition (DecompositionDeclined -> NotImplemented for torch).
    assert config.decomposition_table[torch.ops.aten.erfinv.default].__wrapped__ is erfinv_decomposition
    assert config.capabilities.decomposition("aten::erfinv") is erfinv_decomposition

    registry = registry_with(Records(decomposing, kernel_plugin("erfinv-kernel")))
    config = registry.backend_config("mps")
    assert torch.ops.aten.erfinv.default not in config.decomposition_table
    assert config.capabilities.decomposition("aten::erfinv") is None
    assert config.capabilities.has_shim(torch.ops.aten.erfinv.default)
    assert KERNEL_SOURCE in config.kernel_sources
    assert config.provider_of("aoti_torch_mps_erfinv").plugin == "erfinv-kernel"


def test_decomposition_devices_limit_where_a_decomposition_applies():
    only_metal = OpPlugin(name="erfinv-metal", ops=("aten::erfinv",), decomposition_devices=("mps",),
                          decompositions={"aten::erfinv": lambda x: x})
    registry = registry_with(Records(only_metal))
    assert torch.ops.aten.erfinv.default in registry.backend_config("mps").decomposition_table
    cuda = registry.backend_config("cuda")
    assert torch.ops.aten.erfinv.default not in cuda.decomposition_table
    assert cuda.capabilities.decomposition("aten::erfinv") is None
    # Limiting a decomposition to Metal says CUDA's code generator compiles the op itself...
    assert cuda.capabilities.generates("aten::erfinv")
    assert not registry.backend_config("mps").capabilities.generates("aten::erfinv")
    # ... unless another plugin decomposes it there after all.
    everywhere = OpPlugin(name="erfinv-everywhere", ops=("aten::erfinv",), decompositions={"aten::erfinv": lambda x: x})
    both = registry_with(Records(only_metal, everywhere)).backend_config("cuda").capabilities
    assert not both.generates("aten::erfinv") and both.decomposition("aten::erfinv") is not None
    with pytest.raises(InvalidPluginRecord, match="erfinv-tpu.*decomposition_devices: device must be one of"):
        OpPlugin(name="erfinv-tpu", ops=("aten::erfinv",), decomposition_devices=("tpu",),
                 decompositions={"aten::erfinv": lambda x: x})
    with pytest.raises(InvalidPluginRecord, match="not one string"):
        OpPlugin(name="erfinv-str", ops=("aten::erfinv",), decomposition_devices="mps",
                 decompositions={"aten::erfinv": lambda x: x})


def test_custom_op_prototypes_become_custom_c_shims():
    config = new_registry(env=CLEAN_ENV).backend_config("mps")
    gather = torch.ops.metal.gather_qmv.default
    (prototype,) = config.custom_c_shims[gather]
    assert prototype.startswith("AOTITorchError aoti_torch_mps_gather_qmv(")
    assert config.provider_of("metal::gather_qmv").plugin == "gather-qmv"
    assert inductor_options(config)["aot_inductor.custom_ops_to_c_shims"][gather] == [prototype]


def test_cuda_derives_executorchs_runtime_kernels_under_both_names():
    config = new_registry(env=CLEAN_ENV).backend_config("cuda")
    assert {"aoti_torch_cuda_sort_stable", "at::_ops::sort_stable::call"} <= set(config.fallback_kernels)
    assert config.provider_of("at::_ops::sort_stable::call").plugin == "cuda-runtime-kernels"
    assert not any(name.startswith("aoti_torch_mps_") for name in config.fallback_kernels)
    # CudaBackend's Triton GEMM templates compile addmm and baddbmm: their decompositions are for Metal only.
    for op in ("addmm", "baddbmm"):
        assert getattr(torch.ops.aten, op).default not in config.decomposition_table
        assert config.capabilities.generates(f"aten::{op}") and not config.capabilities.has_shim(f"aten::{op}")
        assert config.capabilities.keeps(f"aten::{op}")
    assert torch.ops.aten.baddbmm.default in new_registry(env=CLEAN_ENV).backend_config("mps").decomposition_table


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        new_registry(env=CLEAN_ENV).backend_config("tpu")


def test_equal_priority_shims_conflict_naming_both():
    registry = registry_with(Records(kernel_plugin("first")), Records(kernel_plugin("second")))
    with pytest.raises(PluginConflictError, match=r"'first' .*test-plugin-0.* and 'second' .*test-plugin-1"):
        registry.backend_config("mps")


def test_higher_priority_wins_and_the_loser_is_recorded():
    registry = registry_with(Records(kernel_plugin("first")), Records(kernel_plugin("second", priority=5)))
    config = registry.backend_config("mps")
    assert config.provider_of("aoti_torch_mps_erfinv").plugin == "second"
    assert [p.plugin for p in config.shadowed] == ["first"]


def test_one_symbol_for_two_ops_conflicts():
    registry = registry_with(Records(kernel_plugin("a", op="aten::erfinv"),
                                     kernel_plugin("b", op="aten::erf")))
    with pytest.raises(PluginConflictError, match="aoti_torch_mps_erfinv.*'a'.*'b'"):
        registry.backend_config("mps")


def test_a_plugin_claiming_a_builtin_shim_conflicts():
    registry = registry_with(Records(kernel_plugin("my-mm", op="aten::mm", symbol="aoti_torch_mps_mm_out")))
    with pytest.raises(PluginConflictError, match="'mm' .*built-in.* and 'my-mm'"):
        registry.backend_config("mps")


def test_duplicate_plugin_names_conflict():
    registry = registry_with(Records(kernel_plugin("mm", op="aten::erfinv")))
    with pytest.raises(PluginConflictError, match="two op plugins are named 'mm'"):
        registry.backend_config("mps")


def make_pass(name):
    def factory(capabilities):
        def run(graph_module):
            return None
        run.__name__ = name
        return run
    return factory


def test_passes_follow_ordering_constraints_and_device():
    specs = Records(
        PassSpec(name="c", factory=make_pass("c"), after=("a",)),
        PassSpec(name="a", factory=make_pass("a")),
        PassSpec(name="b", factory=make_pass("b"), before=("a",), after=("missing",)),
        PassSpec(name="cuda-only", factory=make_pass("cuda-only"), devices=("cuda",)),
        PassSpec(name="late", factory=make_pass("late"), stage="post_grad"),
    )
    config = registry_with(specs).backend_config("mps")
    own = [n for n in config.pass_names if n in {"a", "b", "c", "cuda-only"}]
    assert own == ["b", "a", "c"]
    built = dict(zip(config.pass_names, config.passes))
    assert [built[name].__name__ for name in own] == ["b", "a", "c"]  # each factory's pass, in order
    assert "late" in config.post_grad_pass_names


def test_pass_ordering_cycle_is_an_error():
    specs = Records(PassSpec(name="x", factory=make_pass("x"), after=("y",)),
                    PassSpec(name="y", factory=make_pass("y"), after=("x",)))
    with pytest.raises(PluginConflictError, match="cycle: x -> y -> x"):
        registry_with(specs).backend_config("mps")


def test_pass_factories_see_device_capabilities():
    seen = {}

    def factory(capabilities):
        seen["mm"] = capabilities.has_shim("aten::mm")
        seen["device"] = capabilities.device
        return lambda gm: None

    registry_with(Records(PassSpec(name="probe", factory=factory))).backend_config("mps")
    assert seen == {"mm": True, "device": "mps"}
