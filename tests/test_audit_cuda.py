"""The CUDA side, checked where CI runs (no GPU): the cuda-runtime plugin against upstream's own source,
its pass guards on real exported graphs, ``shimkit audit --backend cuda`` refusing cleanly without a GPU,
reports that say which backend they are for, and the AOTInductor stand-in the GPU numerics check uses
(compiled here for the CPU). The lowering itself runs on a GPU machine: tools/cuda_device.sh, docs/cuda.md."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from shimkit.audit.cli import configure_parser, run
from shimkit.audit.numerics import AotiCompiled, NumericsUnavailable
from shimkit.audit.parallel import MergeError, merge_reports
from shimkit.audit.report import document_of, target_of
from shimkit.audit.targets import METAL, TARGETS
from shimkit.backend import new_registry
from shimkit.plugins.cuda_runtime import (MoveCondPredicateToCpu, TritonKernelsWhereAccepted, has_cond,
                                          sdpa_accepted_by_triton)

CLEAN_ENV = {"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}


def upstream_cuda_fallback_kernels() -> set[str]:
    """The keys of the dict ``CudaBackend.get_supported_fallback_kernels`` returns, read from its source
    (importing the module needs triton, which a CPU install lacks)."""
    spec = importlib.util.find_spec("executorch.backends.cuda")
    source = Path(spec.submodule_search_locations[0], "cuda_backend.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_supported_fallback_kernels":
            # Its returns: ``{}`` on ROCm, else the list.
            returned = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)]
            return {key.value for key in max(returned, key=lambda d: len(d.keys)).keys
                    if isinstance(key, ast.Constant)}
    raise AssertionError("CudaBackend.get_supported_fallback_kernels not found in executorch's source")


def test_the_plugin_keeps_every_kernel_executorchs_cuda_runtime_ships():
    upstream = upstream_cuda_fallback_kernels()
    # Its quantized custom ops are derived from upstream itself where it imports (it needs triton).
    custom = {name for name in upstream if "plain_mm" in name}
    config = new_registry(env=CLEAN_ENV).backend_config("cuda")
    # Kernels shimkit's own plugins ship for CUDA (nonzero's) come on top of upstream's.
    assert upstream - custom == {name for name in config.fallback_kernels if "plain_mm" not in name
                                 and config.provider_of(name).plugin == "cuda-runtime-kernels"}
    assert config.provider_of("aoti_torch_cuda_sort_stable").plugin == "cuda-runtime-kernels"


def test_upstream_cuda_passes_run_first_in_upstreams_order():
    names = new_registry(env=CLEAN_ENV).backend_config("cuda").pass_names
    upstream = ["move_cond_predicate_to_cpu", "replace_int64_floordiv", "triton_kernels"]
    assert [n for n in names if n in upstream] == upstream
    assert names.index("triton_kernels") < names.index("decompose_linear")
    assert not set(upstream) & set(new_registry(env=CLEAN_ENV).backend_config("mps").pass_names)


class _Attention(torch.nn.Module):
    def __init__(self, **options) -> None:
        super().__init__()
        self.options = options

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.options)


def _sdpa_node(dtype=torch.bfloat16, q_length=8, mask_dtype=None, shape=(1, 2, None, 16), kv_length=8,
               dynamic=False, **options):
    q, k, v = (torch.randn(*(q_length if s is None else s for s in shape)).to(dtype),
               *(torch.randn(*(kv_length if s is None else s for s in shape)).to(dtype) for _ in range(2)))
    inputs = (q, k, v) if mask_dtype is None else (q, k, v, torch.ones(q_length, kv_length).to(mask_dtype))
    keys = {len(shape) - 2: torch.export.Dim("keys")} if dynamic else None
    exported = torch.export.export(_Attention(**options), inputs,
                                   dynamic_shapes=(None, keys, keys) if dynamic else None)
    (node,) = exported.graph.find_nodes(op="call_function",
                                        target=torch.ops.aten.scaled_dot_product_attention.default)
    return node


def test_triton_sdpa_only_where_its_kernel_accepts_the_node():
    assert sdpa_accepted_by_triton(_sdpa_node(kv_length=128))
    assert sdpa_accepted_by_triton(_sdpa_node(mask_dtype=torch.bool))
    assert sdpa_accepted_by_triton(_sdpa_node(is_causal=True))
    assert sdpa_accepted_by_triton(_sdpa_node(shape=(1, 2, None, 24)))  # the kernel that masks the tail
    # Where its power-of-2 kernel would let zero-padded keys into the softmax (wrong on the H100): no mask,
    # not causal, and a key length that is not a static multiple of its 128-wide key blocks.
    assert not sdpa_accepted_by_triton(_sdpa_node())
    assert not sdpa_accepted_by_triton(_sdpa_node(kv_length=136))
    assert not sdpa_accepted_by_triton(_sdpa_node(kv_length=128, dynamic=True))
    # What ExecuTorch's triton.sdpa rejects at run time: float32 (the stock failure), float masks,
    # dropout, causal with unequal lengths, tensors that are not 4-D.
    assert not sdpa_accepted_by_triton(_sdpa_node(torch.float32))
    assert not sdpa_accepted_by_triton(_sdpa_node(torch.float16))
    assert not sdpa_accepted_by_triton(_sdpa_node(mask_dtype=torch.bfloat16))
    assert not sdpa_accepted_by_triton(_sdpa_node(dropout_p=0.5))
    assert not sdpa_accepted_by_triton(_sdpa_node(q_length=1, is_causal=True))
    assert not sdpa_accepted_by_triton(_sdpa_node(shape=(2, None, 16)))


class _SplitLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        a, _ = torch.split(x, 4, dim=-1)
        return self.linear(a)


class _BufferedCond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ready", torch.tensor(True))

    def forward(self, x):
        return torch.cond(self.ready, lambda x: x + 1, lambda x: x - 1, (x,))


class _NeverImported(MoveCondPredicateToCpu):
    upstream = ("no_such_module_for_shimkit", "Pass")


def test_upstream_cuda_passes_run_only_where_they_have_something_to_do():
    plain = torch.export.export(_SplitLinear(), (torch.randn(2, 8),))
    with_cond = torch.export.export(_BufferedCond(), (torch.randn(3),))
    assert not has_cond(plain.graph) and has_cond(with_cond.graph)
    # Never imported where there is no cond: nothing to move, and no validation of the views kept.
    assert not _NeverImported()(plain).modified
    with pytest.raises(ModuleNotFoundError):
        _NeverImported()(with_cond)
    moved = MoveCondPredicateToCpu()
    assert moved.requires_exported_program
    assert not moved(with_cond).modified  # upstream's pass moves constants, not nodes
    # The Triton replacement imports triton (absent here) only for a graph with SDPA or top-k.
    assert not TritonKernelsWhereAccepted()(plain.graph_module).modified


def audit(*argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", *argv]), stdout=stdout,
               stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_backend_cuda_without_a_gpu_says_so_and_exits_2():
    code, out, err = audit("--backend", "cuda", "cumsum")
    assert code == 2 and out == ""
    assert "--backend cuda" in err and "needs a CUDA GPU" in err and "docs/cuda.md" in err


def test_reports_name_their_backend_and_merge_keeps_backends_apart(tmp_path):
    cuda = document_of([], plugins=True, target=TARGETS["cuda"])
    metal = document_of([], plugins=True)
    assert (cuda["backend"], cuda["device"]) == ("CudaBackend", "cuda")
    assert target_of(cuda) is TARGETS["cuda"] and target_of(metal) is METAL
    for name, document in (("cuda.json", cuda), ("metal.json", metal)):
        (tmp_path / name).write_text(json.dumps(document))
    assert merge_reports([str(tmp_path / "cuda.json")] * 2)["backend"] == "CudaBackend"
    with pytest.raises(MergeError, match="metal.json: audited for MetalBackend, unlike .*cuda.json"):
        merge_reports([str(tmp_path / "cuda.json"), str(tmp_path / "metal.json")])


class _RowSums(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        return (x * self.weight).sum(-1).cumsum(0)


def test_aoti_compiled_stand_in_keeps_dynamic_sizes_and_matches_eager():
    model = _RowSums()
    rows = torch.export.Dim("rows", min=2, max=64)
    exported = torch.export.export(model, (torch.randn(5, 6),), dynamic_shapes=({0: rows},))
    module = exported.module()
    placeholder = next(iter(exported.graph.find_nodes(op="placeholder", target="x")))
    compiled = AotiCompiled(module, (placeholder.meta["val"],), torch.device("cpu"))
    assert compiled.dynamic_dims == [[0]]
    for size in (5, 17):  # one compilation serves every size the program allows
        x = torch.randn(size, 6)
        torch.testing.assert_close(compiled(x), model(x))

    # It runs in a process of its own: what goes wrong there is an error naming it, never a crash here.
    (Path(compiled._folder.name) / "package.pt2").write_bytes(b"not a package")
    with pytest.raises(NumericsUnavailable, match="AOTInductor's compile-and-run process exited 1"):
        compiled(torch.randn(3, 6))


def test_cuda_writes_out_the_conformers_depthwise_conv1d_as_the_partitioner_keeps_it():
    """ExecuTorch's AOTI partitioner keeps every op as exported, so CudaBackend's passes see conv1d, not
    convolution: on the H100 the grouped-conv1d plugin, declared for convolution alone, never ran and the
    conformer failed in Inductor (NoValidChoicesError). Only the grouped conv1d is written out."""
    from shimkit.audit.loader import load_model
    from shimkit.audit.runner import export_model
    from shimkit.passes import DecomposeInPlace

    loaded = load_model("conformer_block")
    exported = export_model(loaded)
    expected = exported.module()(*loaded.example_inputs)

    def conv1d_groups():
        return [node.args[6] if len(node.args) > 6 else 1 for node in exported.graph.nodes
                if node.target == torch.ops.aten.conv1d.default]

    assert sorted(conv1d_groups()) == [1, 1, 64]
    decompose = DecomposeInPlace.from_capabilities(new_registry(env=CLEAN_ENV).backend_config("cuda").capabilities)
    assert decompose(exported.graph_module).modified
    assert conv1d_groups() == [1, 1]
    torch.testing.assert_close(exported.module()(*loaded.example_inputs), expected, rtol=1e-5, atol=1e-5)


class _ScatterByConstant(torch.nn.Module):
    def forward(self, x):
        index = torch.tensor([[0, 2, 1], [2, 0, 0]])  # a constant of the graph module, not a buffer
        return torch.zeros(2, 3).scatter_add(1, index, x)


def test_the_program_compiled_for_the_gpu_carries_its_constants_there():
    """On the H200 a scatter_add's numerics were "unchecked": its index, made in forward, stayed on the CPU
    while the operands went to the GPU (Module.to moves parameters and buffers only)."""
    from shimkit.audit.numerics import module_on

    x = torch.randn(2, 3)
    module = torch.export.export(_ScatterByConstant(), (x,)).module()
    constants = [node.target for node in module.graph.find_nodes(op="get_attr")]
    assert constants and all(getattr(module, name).device.type == "cpu" for name in constants)
    moved = module_on(module, torch.device("meta"))
    assert all(getattr(moved, name).device.type == "meta" for name in constants)
    assert all(getattr(module, name).device.type == "cpu" for name in constants)  # a copy: the audit's own stays
    torch.testing.assert_close(module_on(module, torch.device("cpu"))(x), _ScatterByConstant()(x))


def test_eager_on_the_gpu_makes_the_models_own_tensors_there():
    """The H200's scatter_add was "unchecked" because eager CUDA failed: ``torch.zeros`` and ``torch.tensor``
    in ``forward`` made CPU tensors beside the GPU input. The check runs the model with the device as the
    default one (here the meta device stands in for the GPU)."""
    from shimkit.audit.numerics import on_device

    class MadeInForward(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(1).device == x.device

    assert on_device(MadeInForward(), torch.device("meta"))(torch.ones(2)) is True
    assert MadeInForward()(torch.ones(2, device="meta")) is False
