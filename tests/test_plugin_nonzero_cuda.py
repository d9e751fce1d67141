"""The nonzero plugin's CUDA side, checked where CI runs (no GPU): the registry derives ``aoti_torch_cuda_nonzero``
(and the name Inductor records for it, ``at::_ops::nonzero::call``) with its sources for the CUDA runtime build;
``shimkit config cuda`` lists them; the CUDA audit's verdict on that name (the same backend patch, a stand-in
for ``CudaBackend``, which needs triton to import) is clean; the shim is written against no more of the c-shim
ABI than ExecuTorch's CUDA runtime and libtorch both define; and, where nvcc is installed, it compiles and its
object asks for nothing else. The kernel itself runs on a GPU: ``tools/cuda_nonzero_check.py`` (every dtype,
strides, 0-d, empty and 2**31-element inputs against ``torch.nonzero``, and Inductor-compiled programs calling
it), and the real CUDA audit below where a GPU and triton are present."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import shimkit.plugins.nonzero as nonzero
from shimkit.audit.linkage import runtime_api, unserved
from shimkit.audit.loader import LoadedModel
from shimkit.audit.options import AuditOptions
from shimkit.audit.recorder import C_SHIM, RUNTIME, KernelCall
from shimkit.audit.runner import ModelAudit, audit_loaded
from shimkit.audit.targets import TARGETS
from shimkit.backend import new_registry
from shimkit.cli import main as shimkit_main
from shimkit.csrc.build import torch_include
from shimkit.integration import registry_backend
from shimkit.runtime.generated import cmake_snippet

CLEAN_ENV = {"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}
ROOT = Path(__file__).resolve().parent.parent
KERNEL_DIR = Path(nonzero.CUDA_KERNEL.directory)
SHIM_SOURCE = KERNEL_DIR / "nonzero_shim_cuda.cu"
SIZE_ACCESSOR = KERNEL_DIR / "aoti_torch_get_size.cpp"
RECORDED = "at::_ops::nonzero::call"
SYMBOL = "aoti_torch_cuda_nonzero"
TORCH_INCLUDE = torch_include() / "torch" / "csrc" / "inductor" / "aoti_torch"


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_shimkit_tool_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = _tool("cuda_nonzero_check")
# The aoti_torch_* functions ExecuTorch's CUDA runtime defines (upstream backends/aoti/common_shims_slim.h and
# backends/cuda/runtime/shims/*.h), kept in the GPU check that also verifies the built library against it.
CUDA_RUNTIME_API = CHECK.EXECUTORCH_CUDA_RUNTIME_API


def _cuda_config():
    return new_registry(env=CLEAN_ENV).backend_config("cuda")


def _called(source: Path) -> set[str]:
    """The aoti_torch_* functions a C++/CUDA source declares or calls, less those it defines."""
    text = re.sub(r"//[^\n]*", "", source.read_text())
    text = re.sub(r'"[^"\n]*"', '""', text)
    named = set(re.findall(r"\b(aoti_torch_\w+)\s*\(", text))
    defined = set(re.findall(r"\b(aoti_torch_\w+)\s*\([^;{()]*\)\s*\{", text))
    return named - defined


def _libtorch_api() -> set[str]:
    return set(re.findall(r"\b(aoti_torch_\w+)\s*\(", (TORCH_INCLUDE / "c" / "shim.h").read_text()))


# -- the registry ---------------------------------------------------------------------------------------------

def test_the_registry_derives_the_cuda_shim_with_its_sources():
    config = _cuda_config()
    assert {SYMBOL, RECORDED} <= set(config.fallback_kernels)
    for name in (SYMBOL, RECORDED):
        provision = config.provider_of(name)
        assert provision is not None and provision.plugin == "nonzero", provision
    assert str(SHIM_SOURCE) in config.kernel_sources and str(SIZE_ACCESSOR) in config.kernel_sources
    # Nothing of Metal's in the CUDA build, nothing of CUDA's in the Metal one; the accessor in both.
    assert not any(path.endswith((".metal", ".mm")) for path in config.kernel_sources if "nonzero" in path)
    mps = new_registry(env=CLEAN_ENV).backend_config("mps")
    assert str(SHIM_SOURCE) not in mps.kernel_sources and str(SIZE_ACCESSOR) in mps.kernel_sources
    assert mps.provider_of("aoti_torch_mps_nonzero").plugin == "nonzero"
    assert f'"{SHIM_SOURCE}"' in cmake_snippet(config)


def test_shimkit_config_cuda_lists_the_shim_and_its_sources():
    def run(*argv: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert shimkit_main(["config", "cuda", *argv]) == 0
        return out.getvalue()

    document = json.loads(run())
    assert {SYMBOL, RECORDED} <= set(document["fallback_kernels"])
    assert str(SHIM_SOURCE) in document["kernel_sources"] and str(SIZE_ACCESSOR) in document["kernel_sources"]
    cmake = run("--cmake")
    assert "set(SHIMKIT_CUDA_KERNEL_SOURCES" in cmake and str(SHIM_SOURCE) in cmake


# -- the audit's verdict --------------------------------------------------------------------------------------

class _CudaBackendStandIn:
    """What shimkit's backend patch touches of ExecuTorch's ``CudaBackend`` (which imports triton)."""

    @classmethod
    def get_device_name(cls) -> str:
        return "cuda"

    @classmethod
    def get_supported_fallback_kernels(cls) -> dict[str, None]:
        return {}

    @classmethod
    def get_decomposition_table(cls) -> dict:
        return {}

    @classmethod
    def get_custom_passes(cls, compile_specs) -> list:
        return []

    @classmethod
    def get_aoti_compile_options(cls, compile_specs) -> dict:
        return {}


def _nonzero_of_where() -> LoadedModel:
    models = _tool("cuda_models")
    model, inputs = models.nonzero_of_where()
    return LoadedModel("nonzero_of_where", model, inputs)


def test_the_cuda_audit_of_nonzero_of_where_finds_the_kernel_provided():
    """The CUDA audit judges each name the wrapper records against the patched backend's
    ``get_supported_fallback_kernels`` (audit/runner.py). Inductor's cpp wrapper records nonzero's c-shim call
    as ``at::_ops::nonzero::call`` for mps and cuda alike (on the H200: ``at::_ops::nonzero::call c-shim
    plugin 'nonzero'``, CLEAN): the Metal audit of the same model, which runs here, gives the names; the CUDA
    configuration must provide each of them, and stock does not."""
    recorded = audit_loaded(_nonzero_of_where(), config=new_registry(env=CLEAN_ENV).backend_config("mps"))
    assert recorded.failure is None, recorded.failure
    names = {kernel.name for kernel in recorded.kernels if kernel.mechanism == C_SHIM}
    assert names == {RECORDED}
    with registry_backend(_CudaBackendStandIn, _cuda_config()):
        supported = frozenset(_CudaBackendStandIn.get_supported_fallback_kernels())
    audit = ModelAudit("nonzero_of_where", plugins=True, kernels=[KernelCall(n, C_SHIM) for n in names],
                       supported=supported)
    assert audit.missing == [] and audit.status == "clean"
    assert _CudaBackendStandIn.get_supported_fallback_kernels() == {}  # the patch is undone
    assert not {SYMBOL, RECORDED} & _stock_cuda_fallback_kernels()  # what made stock MISSING it


def _stock_cuda_fallback_kernels() -> set[str]:
    """The names ``CudaBackend.get_supported_fallback_kernels`` returns, read from upstream's source."""
    spec = importlib.util.find_spec("executorch.backends.cuda")
    assert spec is not None and spec.submodule_search_locations
    tree = ast.parse(Path(spec.submodule_search_locations[0], "cuda_backend.py").read_text())
    (function,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                   and n.name == "get_supported_fallback_kernels"]
    tables = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)]
    names = {key.value for table in tables for key in table.keys if isinstance(key, ast.Constant)}
    assert "aoti_torch_cuda_sort_stable" in names  # the table was found
    return names


def test_the_size_accessor_the_cuda_program_calls_is_shipped_for_the_cuda_runtime():
    """A program returning nonzero's result reads its row count with aoti_torch_get_size (as on Metal), which
    ExecuTorch's CUDA runtime lacks: the CUDA kernel's sources define it, over two functions the runtime has."""
    assert "aoti_torch_get_size" not in CUDA_RUNTIME_API and "aoti_torch_get_size" in _libtorch_api()
    assert "aoti_torch_get_size.cpp" in nonzero.CUDA_KERNEL.runtime_sources
    assert unserved([KernelCall("aoti_torch_get_size", RUNTIME)], _cuda_config()) == []
    assert _called(SIZE_ACCESSOR) == {"aoti_torch_get_dim", "aoti_torch_get_sizes"}
    assert _called(SIZE_ACCESSOR) <= CUDA_RUNTIME_API and _called(SIZE_ACCESSOR) <= runtime_api()


@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("triton") is None,
                    reason="the real CUDA lowering needs a CUDA GPU and triton")
def test_the_real_cuda_audit_is_clean():
    audit = audit_loaded(_nonzero_of_where(), config=_cuda_config(), options=AuditOptions(target=TARGETS["cuda"]))
    assert audit.failure is None, audit.failure
    assert audit.status == "clean" and RECORDED in {kernel.name for kernel in audit.kernels}


# -- the source against the ABI -------------------------------------------------------------------------------

def test_the_shim_uses_only_the_abi_both_runtimes_define():
    called = _called(SHIM_SOURCE)
    assert {"aoti_torch_empty_strided", "aoti_torch_get_strides", "aoti_torch_get_current_cuda_stream"} <= called
    assert called <= CUDA_RUNTIME_API, called - CUDA_RUNTIME_API
    assert called <= _libtorch_api(), called - _libtorch_api()
    assert not re.search(r"#include\s*[<\"](executorch|torch|ATen|c10)/", SHIM_SOURCE.read_text())


def test_the_shim_has_torchs_prototype():
    header = (TORCH_INCLUDE / "generated" / "c_shim_cuda.h").read_text()
    declared = re.search(rf"AOTITorchError {SYMBOL}\(([^)]*)\);", header)
    assert declared is not None
    defined = re.search(rf'extern "C" SHIMKIT_EXPORT AOTITorchError {SYMBOL}\(([^)]*)\)\s*\{{', SHIM_SOURCE.read_text())
    assert defined is not None and defined.group(1) == declared.group(1) == "AtenTensorHandle self, AtenTensorHandle* ret0"


def _undefined_aoti(object_file: Path) -> set[str]:
    listing = subprocess.run(["nm", "--undefined-only", str(object_file)], capture_output=True, text=True,
                             check=True).stdout
    names = set()
    for line in listing.splitlines():
        fields = line.split()
        if fields and fields[-1].startswith("aoti_torch_"):
            names.add(fields[-1])
    return names


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("nm") is None, reason="no nvcc (CUDA toolkit)")
def test_nvcc_compiles_the_shim_and_its_object_needs_only_the_runtimes_abi(tmp_path):
    object_file = tmp_path / "nonzero_shim_cuda.o"
    compiled = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-O1", "-Xcompiler", "-fPIC,-Wall", "-c",
                               str(SHIM_SOURCE), "-o", str(object_file)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    assert "warning" not in compiled.stderr.lower(), compiled.stderr
    needed = _undefined_aoti(object_file)
    assert needed == _called(SHIM_SOURCE) and needed <= CUDA_RUNTIME_API
    defined = subprocess.run(["nm", "--defined-only", "--extern-only", str(object_file)], capture_output=True,
                             text=True, check=True).stdout
    assert re.search(rf"\bT {SYMBOL}$", defined, re.M)


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_the_size_accessor_compiles_alone_and_needs_only_dim_and_sizes(tmp_path):
    object_file = tmp_path / "aoti_torch_get_size.o"
    compiler = shutil.which("c++") or shutil.which("g++")
    assert compiler is not None
    compiled = subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fPIC", "-c",
                               str(SIZE_ACCESSOR), "-o", str(object_file)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    assert _undefined_aoti(object_file) == {"aoti_torch_get_dim", "aoti_torch_get_sizes"}


def test_the_gpu_check_refuses_cleanly_without_a_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without a GPU")
    results = tmp_path / "results.json"
    completed = subprocess.run([sys.executable, str(ROOT / "tools" / "cuda_nonzero_check.py"), str(results)],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "no CUDA GPU" in completed.stdout
    assert "no CUDA GPU" in json.loads(results.read_text())["summary"]
