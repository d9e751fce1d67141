"""Every runtime adapter the op plugins ship, run inside a whole generated Metal program (shimkit.runtime.program,
``shimkit audit --execute``) and, under ``csrc/sanitize.sh``, inside a runtime built with ASan and UBSan.

One small model per adapter, whose lowered program calls that adapter's c-shim, audited with the default
registry's mps configuration: the audit must record the kernel and the executed program must agree with eager.
Where no program can reach an adapter as things stand, the test says why and calls the adapter directly in
the same runtime library the programs link (still under the sanitizers):

* random numbers (``aoti_torch_mps_randint_low_out``: the seeds of Inductor's Philox code) cannot equal eager's:
  the program is run again directly and its samples are checked by their properties;
* ``aoti_torch_mps_nonzero``: every program that calls it reads the data-dependent row count through
  ``aoti_torch_get_size``, which ExecuTorch's Metal runtime (upstream ``backends/aoti/common_shims.h``) and so
  the stand-in lack: the program cannot link. It runs here with a test-only accessor added to the runtime;
* the MSL elementwise adapter (``csrc/msl/msl_elementwise.mm`` and the generated entry points): the default
  registry's one elementwise MSL shim is the example plugin's ``aoti_torch_mps_logaddexp_out``, which no
  program calls: Inductor writes ``logaddexp`` as Metal code of its own and emits no out-variant fallback for
  it (nor for any elementwise op). Nor can a custom op reach the adapter: its generated entry point takes
  ``out`` and then one input per positional Tensor argument of the op, while Inductor passes a custom op's
  c-shim its arguments in schema order (a positional ``out`` is counted among the inputs; a keyword-only one
  comes last). So it is called directly.

A mutant adapter (sort's with two ``setArg`` indices swapped) must be reported as wrong numbers, naming the
model and the output.
"""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import textwrap
from pathlib import Path

import pytest
import torch

import shimkit.plugins.sort as sort_plugin
from shimkit.audit import numerics as numerics_check
from shimkit.audit.loader import load_model
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import get_registry, new_registry
from shimkit.runtime import program
from shimkit.registry import hookimpl
from shimkit.store import default_store


def _write_model(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return f"{path}:make"


def _config():
    return get_registry().backend_config("mps")


_PROBE = 'extern "C" long shimkit_runtime_live_tensors();\nextern "C" void* probe() { return (void*)&shimkit_runtime_live_tensors; }\n'
_checked_runtimes: set[Path] = set()


def _program_calls_runtime(path: Path) -> bool:
    """Whether a program linked against the runtime at ``path`` calls that runtime in this process."""
    runtime = program.load_runtime(path)
    probe = ctypes.CDLL(str(program.compile_wrapper(_PROBE, path)))
    probe.probe.restype = ctypes.c_void_p
    return probe.probe() == ctypes.cast(runtime.shimkit_runtime_live_tensors, ctypes.c_void_p).value


def _check_programs_link_their_own_runtime(config) -> None:
    """A program built against ``config``'s runtime must call that runtime, even when this process has loaded
    another one (a stock or differently configured runtime, by an earlier test): else its kernels are
    another runtime's, the handles it is given are foreign there, and the process may abort."""
    path = program.runtime_library(config)
    if path in _checked_runtimes:
        return
    if not _program_calls_runtime(path):
        pytest.fail(f"a program linked against {path} calls another runtime loaded earlier in this process: the "
                    f"loader binds a program's DT_NEEDED entry to the first library of that name it loaded, so "
                    f"every runtime needs a name of its own (runtime/program.py, _runtime_library)")
    _checked_runtimes.add(path)


def test_programs_call_the_runtime_they_were_linked_against_whatever_else_is_loaded():
    stock, default = program.runtime_library(None), program.runtime_library(_config())
    assert stock != default and stock.name != default.name
    assert _program_calls_runtime(stock) and _program_calls_runtime(default)


def _execute(spec: str, config=None):
    config = config if config is not None else _config()
    _check_programs_link_their_own_runtime(config)
    return audit_loaded(load_model(spec), config=config, options=AuditOptions(numerics="execute"))


def _kernels(audit) -> set[str]:
    return {kernel.name for kernel in audit.kernels}


def _assert_ran_clean(audit, *kernels: str) -> None:
    assert set(kernels) <= _kernels(audit), f"the program calls {sorted(_kernels(audit))}, not {kernels}"
    assert audit.numerics is not None and audit.numerics.ran == "program"
    assert audit.status == "clean", (audit.failure, audit.numerics)
    assert audit.numerics.checks and all(check.ok for check in audit.numerics.checks)


def _stable_folder(files: dict[str, str]) -> Path:
    """``files`` written to an entry of the artifact store named by their digest. A runtime library's digest
    covers its adapters' paths, so a copy under tmp_path would rebuild the whole runtime on every run; this
    one is built once."""
    store = default_store()

    def produce(staging: Path) -> None:
        for name, text in files.items():
            (staging / name).write_text(text)

    return store.build("test-sources", store.key("test-sources", [p for item in sorted(files.items()) for p in item]),
                       produce)


@pytest.fixture(scope="module")
def runtime():
    """The runtime the programs of these tests link: the default registry's adapters in it."""
    return program.load_runtime(program.runtime_library(_config()))


# -- sort ------------------------------------------------------------------------------------------------------

SORT_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.sort(x, dim=-1, descending=True)
            return values, indices, torch.argsort(x, dim=0, stable=True)

    def make():
        batch = torch.export.Dim("batch", min=1, max=8)
        return Model(), (torch.randn(3, 9, generator=torch.Generator().manual_seed(0)),), {"x": {0: batch}}
"""


def test_sort_adapter_sorts_rows_and_columns_in_the_program(tmp_path):
    audit = _execute(_write_model(tmp_path, "sort_model", SORT_MODEL))
    _assert_ran_clean(audit, "at::_ops::sort_stable::call")
    # along the last dim (inner 1) and the first (inner 9), at the example, both bounds and one past it
    assert {tuple(check.sizes.values()) for check in audit.numerics.checks} == {(3,), (1,), (8,), (4,)}
    assert all(max(check.max_errors) == 0.0 for check in audit.numerics.checks)


def _sort_plugin_with_adapter(adapter_text: str):
    """The sort plugin's record with its kernel's runtime sources taken from a folder holding
    ``adapter_text`` as ``sort_shim_mps.mm`` (and the plugin's own ``sort.metal``), and that folder."""
    directory = Path(sort_plugin.KERNEL.directory)
    folder = _stable_folder({"sort_shim_mps.mm": adapter_text, "sort.metal": (directory / "sort.metal").read_text()})
    kernel = dataclasses.replace(sort_plugin.KERNEL, directory=str(folder))
    (record,) = list(sort_plugin.shimkit_op_plugins())
    return dataclasses.replace(record, name="sort-mutant",
                               shims=tuple(dataclasses.replace(shim, kernel=kernel) for shim in record.shims)), folder


class _Records:
    def __init__(self, *records):
        self.records = records

    @hookimpl
    def shimkit_op_plugins(self):
        return list(self.records)


def test_a_sort_adapter_with_two_arguments_swapped_is_reported_wrong_naming_model_and_output(tmp_path):
    text = (Path(sort_plugin.KERNEL.directory) / "sort_shim_mps.mm").read_text()
    bound = "kernel->setArg(3, size);\n      kernel->setArg(4, inner);"
    assert text.count(bound) == 1
    # The row length and the stride between a row's elements change places: every read stays inside the
    # tensor (their product is unchanged), and each thread ranks its element along the wrong axis.
    mutant = text.replace(bound, "kernel->setArg(4, size);\n      kernel->setArg(3, inner);")
    registry = new_registry(env={"SHIMKIT_BLOCK_PLUGINS": "sort"})
    record, folder = _sort_plugin_with_adapter(mutant)
    registry.register(_Records(record), name="sort-mutant")
    config = registry.backend_config("mps")
    assert config.provider_of("aoti_torch_mps_sort_stable").plugin == "sort-mutant"
    assert [s for s in config.kernel_sources if s.endswith("sort_shim_mps.mm")] == [str(folder / "sort_shim_mps.mm")]

    audit = _execute(_write_model(tmp_path, "sort_mutant_model", SORT_MODEL), config)
    assert "sort_mutant_model" in audit.name
    assert audit.failure is None and audit.numerics.ran == "program" and audit.numerics.unavailable is None
    assert audit.status == "wrong"
    # sorting the last dim goes wrong at every size: the values (output 0) are named, with their error
    assert len(audit.numerics.checks) == 4
    assert all(not check.ok and check.error.startswith("output 0: max error")
               for check in audit.numerics.checks), audit.numerics


# -- addmm (its runtime adapter is Objective-C++ over MPSGraph, compiled against shimkit.objc) -----------------

def test_addmm_mpsgraph_adapter_computes_linear_layers_in_the_program(tmp_path):
    audit = _execute(_write_model(tmp_path, "addmm_model", """
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(6, 5)

            def forward(self, x):
                return self.linear(x)

        def make():
            generator = torch.Generator().manual_seed(0)
            model = Model()
            with torch.no_grad():
                model.linear.weight.copy_(torch.randn(5, 6, generator=generator))
                model.linear.bias.copy_(torch.randn(5, generator=generator))
            return model, (torch.randn(3, 6, generator=generator),)
    """))
    _assert_ran_clean(audit, "aoti_torch_mps_addmm_out")


ADDMM_ADAPTER = ("addmm_plan.cpp", "addmm_metal.mm", "addmm_shim_mps.mm")
# Before its fix, the adapter asked executeMPSGraph itself to wait, which upstream's ignores (et_metal.mm:1175-1188):
# an `out` the kernel packs was unpacked from its staging buffer before the graph had written it.
ADDMM_WAIT_MUTANT = ("addmm_shim_mps.mm", """    stream_->executeMPSGraph(graph, feeds, results);
    if (wait) stream_->synchronize(SyncType::COMMIT_AND_WAIT);
""", """    stream_->executeMPSGraph(graph, feeds, results, wait ? SyncType::COMMIT_AND_WAIT : SyncType::COMMIT);
""")


def _addmm_runtime(folder: Path) -> ctypes.CDLL:
    """The stand-in runtime with the addmm adapter compiled from ``folder`` in place of the runtime's own addmm."""
    fallbacks = tuple(path for path, shims in program.own_fallbacks().items()
                      if "aoti_torch_mps_addmm_out" not in shims)
    library = program._runtime_library(tuple(str(folder / name) for name in ADDMM_ADAPTER), "", fallbacks)
    runtime = program.load_runtime(library)
    runtime.aoti_torch_mps_addmm_out.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_double] * 2
    return runtime


def _addmm_into_strided_out(runtime: ctypes.CDLL) -> tuple[torch.Tensor, torch.Tensor]:
    """``addmm`` into the left 5 columns of an [3, 8] buffer (an ``out`` the kernel packs), called as a program
    calls it, then the stream synchronized as MetalBackend::execute does; the result and ATen's."""
    generator = torch.Generator().manual_seed(5)
    self, mat1, mat2 = (torch.randn(*shape, generator=generator) for shape in ((5,), (3, 4), (4, 5)))
    out = torch.full((3, 8), float("nan"))[:, :5]
    handles = [program.tensor_handle(runtime, tensor) for tensor in (out, self, mat1, mat2)]
    try:
        assert runtime.aoti_torch_mps_addmm_out(*handles, 0.5, 2.0) == 0, program.take_failure(runtime)
        assert runtime.shimkit_runtime_synchronize() == 0, program.take_failure(runtime)
    finally:
        for handle in handles:
            runtime.aoti_torch_delete_tensor_object(handle)
    return out, torch.addmm(self, mat1, mat2, beta=0.5, alpha=2.0)


def test_addmm_adapter_waits_for_its_graph_before_unpacking_out(tmp_path):
    real = Path(sort_plugin.__file__).parents[1] / "addmm" / "kernel"
    out, expected = _addmm_into_strided_out(_addmm_runtime(real))
    torch.testing.assert_close(out, expected)

    mutant = tmp_path / "kernel"
    shutil.copytree(real, mutant)
    name, fixed, broken = ADDMM_WAIT_MUTANT
    text = (mutant / name).read_text()
    assert text.count(fixed) == 1, "the mutant no longer matches the adapter"
    (mutant / name).write_text(text.replace(fixed, broken))
    out, expected = _addmm_into_strided_out(_addmm_runtime(mutant))
    assert not torch.allclose(out, expected, equal_nan=False)


# -- linalg ----------------------------------------------------------------------------------------------------

_SPD = """
    def spd(*batch, n, seed):
        generator = torch.Generator().manual_seed(seed)
        a = torch.randn(*batch, n, n, generator=generator)
        return a @ a.mT + n * torch.eye(n)

    def randn(*shape, seed):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
"""

LINALG_MODELS = {
    # torch.linalg.lu_solve itself is refused by the edge verifier (not core ATen): solve reaches lu_solve
    "lu": ("""
        def forward(self, a, b):
            LU, pivots = torch.linalg.lu_factor(a)
            return torch.linalg.solve(a, b), LU, pivots
        """, "(randn(2, 5, 5, seed=1), randn(2, 5, 3, seed=2))",
        ("shimkit::lu_factor", "shimkit::lu_solve", "shimkit::linalg_check_errors")),
    "cholesky": ("""
        def forward(self, a):
            return torch.linalg.cholesky(a)
        """, "(spd(2, n=5, seed=3),)", ("shimkit::cholesky", "shimkit::linalg_check_errors")),
    # eigenvectors and singular vectors are unique up to sign: compared through sign-free functions of them
    "eigh": ("""
        def forward(self, a):
            values, vectors = torch.linalg.eigh(a)
            return values, vectors * vectors
        """, "(spd(2, n=4, seed=4),)", ("shimkit::eigh", "shimkit::linalg_check_errors")),
    "svd": ("""
        def forward(self, a):
            u, s, vh = torch.linalg.svd(a, full_matrices=False)
            return s, u.abs(), vh.abs()
        """, "(randn(2, 5, 3, seed=5),)", ("shimkit::svd", "shimkit::linalg_check_errors")),
    "qr": ("""
        def forward(self, a):
            return torch.linalg.qr(a)
        """, "(randn(2, 5, 4, seed=6),)", ("shimkit::qr",)),
    "ldl_factor": ("""
        def forward(self, a):
            return torch.linalg.ldl_factor(a)
        """, "(spd(2, n=4, seed=7),)", ("shimkit::ldl_factor", "shimkit::linalg_check_errors")),
}


@pytest.mark.parametrize("name", sorted(LINALG_MODELS))
def test_linalg_adapter_computes_like_aten_in_the_program(tmp_path, name):
    forward, inputs, kernels = LINALG_MODELS[name]
    body = textwrap.dedent(_SPD) + "\nclass Model(torch.nn.Module):\n" + textwrap.indent(textwrap.dedent(forward), "    ")
    body += f"\n\ndef make():\n    return Model(), {inputs}\n"
    audit = _execute(_write_model(tmp_path, f"linalg_{name}_model", body))
    _assert_ran_clean(audit, *kernels)


# -- fft -------------------------------------------------------------------------------------------------------

FFT_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            spectrum = torch.fft.rfft(x, dim=-1, norm="ortho")
            filtered = torch.fft.irfft(spectrum * torch.linspace(1.0, 0.0, spectrum.shape[-1]), n=x.shape[-1])
            return filtered, torch.fft.fft(x.transpose(0, 1), dim=0).abs()

    def make():
        return Model(), (torch.randn(3, 257, generator=torch.Generator().manual_seed(0)),)
"""


def test_fft_adapter_computes_long_transforms_in_the_program(tmp_path):
    """257 points (prime: Bluestein, through power-of-two Stockham passes) in rfft, irfft and fft: the
    complex_pairs pass writes shimkit::fft_c2c for each, the program calls the adapter."""
    audit = _execute(_write_model(tmp_path, "fft_model", FFT_MODEL))
    _assert_ran_clean(audit, "shimkit::fft_c2c")


def _shim(runtime, symbol: str, *scalars) -> ctypes._CFuncPtr:
    """The c-shim ``symbol(tensor, *scalars, AtenTensorHandle* ret0)`` of ``runtime``, typed for ctypes."""
    entry = getattr(runtime, symbol)
    entry.argtypes = [ctypes.c_void_p, *scalars, ctypes.POINTER(ctypes.c_void_p)]
    entry.restype = ctypes.c_int
    return entry


# ExecuTorch's Metal runtime allocates no buffer of 0 bytes (et_metal.mm:209-213), nor does the stand-in: on a Mac an
# adapter whose result is empty fails there.
NO_EMPTY_BUFFER = "Failed to allocate 0 bytes on Metal device"


def _call_for_one_tensor(runtime, entry, x: torch.Tensor, *scalars) -> torch.Tensor | str:
    """``entry(x, *scalars, &result)`` and its result as a CPU tensor, or the runtime's failure where the call
    fails; every handle freed."""
    handle, result = program.tensor_handle(runtime, x), ctypes.c_void_p()
    try:
        if entry(handle, *scalars, ctypes.byref(result)) != 0:
            assert result.value is None
            return program.take_failure(runtime)
        try:
            return program.tensor_from_handle(runtime, result.value)
        finally:
            runtime.aoti_torch_delete_tensor_object(result.value)
    finally:
        runtime.aoti_torch_delete_tensor_object(handle)


def _fft_c2c(runtime, x: torch.Tensor, inverse: bool, normalization: int) -> torch.Tensor | str:
    entry = _shim(runtime, "aoti_torch_mps_fft_c2c", ctypes.c_int32, ctypes.c_int64)
    return _call_for_one_tensor(runtime, entry, x, int(inverse), normalization)


@pytest.mark.parametrize("shape", [(2, 1, 2), (3, 64, 2), (2, 3, 360, 2), (2, 17, 2), (1, 1009, 2), (0, 8, 2)],
                         ids=["one-point", "radix-8", "mixed-radix", "bluestein", "bluestein-long", "no-rows"])
@pytest.mark.parametrize("inverse, normalization", [(False, 0), (True, 2), (False, 1)])
def test_fft_adapter_called_directly_matches_aten(runtime, shape, inverse, normalization):
    from shimkit.plugins.complex_fft import fft_c2c

    x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[-2]))
    got = _fft_c2c(runtime, x, inverse, normalization)
    if x.numel() == 0:  # its empty result
        assert NO_EMPTY_BUFFER in got
        return
    assert isinstance(got, torch.Tensor), got
    want = fft_c2c(x, inverse, normalization)
    assert got.shape == x.shape
    largest = float(want.abs().amax()) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6 * max(1.0, largest) * shape[-2] ** 0.5)


def test_fft_adapter_refuses_what_is_not_contiguous_float32_pairs(runtime):
    entry = _shim(runtime, "aoti_torch_mps_fft_c2c", ctypes.c_int32, ctypes.c_int64)
    for bad, normalization in ((torch.zeros(4, 3), 0), (torch.zeros(2, 4, dtype=torch.int32), 0),
                               (torch.zeros(2, 4).mT, 0), (torch.zeros(4, 2), 3), (torch.zeros(0, 2), 0)):
        handle, result = program.tensor_handle(runtime, bad), ctypes.c_void_p()
        try:
            assert entry(handle, 0, normalization, ctypes.byref(result)) != 0, (bad.shape, bad.dtype, normalization)
            assert result.value is None
        finally:
            runtime.aoti_torch_delete_tensor_object(handle)


# -- random ----------------------------------------------------------------------------------------------------

def test_randint_adapter_seeds_the_programs_random_code(tmp_path, monkeypatch):
    """The program's samples cannot equal eager's: the audit must find exactly the random outputs different
    (bernoulli of 0s and 1s is exact); the program, run again directly, draws fresh samples with the right
    shape, dtype, range and moments each time."""
    programs = []
    executed_programs = numerics_check.executed_programs

    def keep(*args, **kwargs):
        programs.extend(executed_programs(*args, **kwargs))
        return programs

    monkeypatch.setattr(numerics_check, "executed_programs", keep)
    audit = _execute(_write_model(tmp_path, "random_model", """
        class Model(torch.nn.Module):
            def forward(self, p):
                return torch.bernoulli(p), torch.rand(p.shape), torch.randn(p.shape)

        def make():
            return Model(), ((torch.arange(4096) % 2).float().reshape(64, 64),)
    """))
    assert "aoti_torch_mps_randint_low_out" in _kernels(audit)
    assert audit.failure is None and audit.numerics.ran == "program" and audit.numerics.unavailable is None
    (check,) = audit.numerics.checks
    assert check.max_errors[0] == 0.0 and check.error.startswith("output 1: max error"), check
    assert audit.status == "wrong"

    (delegate,) = programs
    p = (torch.arange(4096) % 2).float().reshape(64, 64)
    first, second = delegate(p), delegate(p)
    for bernoulli, uniform, normal in (first, second):
        assert torch.equal(bernoulli, p)
        assert uniform.shape == normal.shape == (64, 64) and uniform.dtype == normal.dtype == torch.float32
        assert bool(((uniform >= 0) & (uniform < 1)).all()) and bool(normal.isfinite().all())
        # 4096 draws: the mean's standard error is 0.0045 (uniform) and 0.016 (normal)
        assert abs(float(uniform.mean()) - 0.5) < 0.05 and abs(float(normal.mean())) < 0.15
        assert 0.85 < float(normal.std()) < 1.15
        assert uniform.unique().numel() > 4000
    assert not torch.equal(first[1], second[1]) and not torch.equal(first[2], second[2])  # fresh seeds per run


def _randint(runtime, out: torch.Tensor, low: int, high: int) -> int:
    entry = runtime.aoti_torch_mps_randint_low_out
    entry.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
    entry.restype = ctypes.c_int
    handle = program.tensor_handle(runtime, out)  # over out's memory
    try:
        size = (ctypes.c_int64 * max(out.dim(), 1))(*out.shape)
        return entry(handle, low, high, size, out.dim())
    finally:
        runtime.aoti_torch_delete_tensor_object(handle)


def test_randint_adapter_draws_every_value_of_low_to_high_and_only_those(runtime):
    """Inductor only asks for the full int64 range; the adapter takes any ``[low, high)``."""
    first, second = torch.full((4, 256), -100, dtype=torch.int64), torch.full((4, 256), -100, dtype=torch.int64)
    assert _randint(runtime, first, -3, 5) == 0 and _randint(runtime, second, -3, 5) == 0
    for drawn in (first, second):
        assert set(drawn.unique().tolist()) == set(range(-3, 5))  # each value missed with chance (7/8)^1024
    assert not torch.equal(first, second)
    wide = torch.zeros(1000, dtype=torch.int64)
    assert _randint(runtime, wide, -(2**63), 2**63 - 1) == 0
    assert (wide < 0).any() and (wide > 0).any() and wide.unique().numel() == 1000
    assert _randint(runtime, torch.zeros(3, dtype=torch.int64), 5, 5) != 0  # low >= high is refused
    assert _randint(runtime, torch.zeros(3, dtype=torch.int32), 0, 5) != 0  # so is anything but int64
    program.take_failure(runtime)


# -- nonzero ---------------------------------------------------------------------------------------------------

NONZERO_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x)

    def make():
        x = torch.tensor([[0.0, 1.5, 0.0, -0.0], [float("nan"), 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
        return Model(), (x,)
"""


def test_nonzero_program_links_with_the_plugins_size_accessor_and_computes_like_eager(tmp_path):
    """The wrapper reads nonzero's row count with aoti_torch_get_size, which ExecuTorch's Metal runtime lacks:
    without the plugin's kernel/aoti_torch_get_size.cpp the program did not link (Unlinkable)."""
    audit = _execute(_write_model(tmp_path, "nonzero_model", NONZERO_MODEL))
    _assert_ran_clean(audit, "at::_ops::nonzero::call")


NONZERO_USED_MODEL = """
    class Model(torch.nn.Module):
        def forward(self, x):
            index = torch.nonzero(x > 0.5)
            return index * 3 + 1, x[index[:, 0], index[:, 1]] * 2, index.sum(0)

    def make():
        return Model(), (torch.rand(6, 5, generator=torch.Generator().manual_seed(0)),)
"""


def test_nonzero_result_read_by_later_kernels_computes_like_eager(tmp_path):
    """Inductor's kernels after the call index nonzero's result with ATen's strides, (1, rows): a row-major
    result read them wrong (max errors 12, 5.8 and 94)."""
    audit = _execute(_write_model(tmp_path, "nonzero_used", NONZERO_USED_MODEL))
    _assert_ran_clean(audit, "at::_ops::nonzero::call")


def _nonzero(runtime, x: torch.Tensor) -> torch.Tensor | str:
    return _call_for_one_tensor(runtime, _shim(runtime, "aoti_torch_mps_nonzero"), x)


@pytest.mark.parametrize("x", [
    torch.tensor([[0.0, 1.5, 0.0, -0.0], [float("nan"), 0.0, 0.0, 2.0]]),
    torch.arange(24).reshape(2, 3, 4) % 5 == 0,
    torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4),
    torch.tensor(3.0), torch.tensor(0.0), torch.zeros(0, 3), torch.zeros(5, dtype=torch.bfloat16),
], ids=["float", "bool-3d", "int32", "0d-nonzero", "0d-zero", "empty", "all-zero-bfloat16"])
def test_nonzero_adapter_called_directly_matches_aten(runtime, x):
    result = _nonzero(runtime, x)
    if torch.nonzero(x).numel() == 0:  # nothing found: an empty result
        assert NO_EMPTY_BUFFER in result
        return
    assert isinstance(result, torch.Tensor), result
    assert result.dtype == torch.int64
    assert torch.equal(result, torch.nonzero(x)) and result.stride() == torch.nonzero(x).stride()


# -- the MSL elementwise adapter -------------------------------------------------------------------------------

def _logaddexp_out(runtime, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> int:
    entry = runtime.aoti_torch_mps_logaddexp_out
    entry.argtypes = [ctypes.c_void_p] * 3
    entry.restype = ctypes.c_int
    handles = [program.tensor_handle(runtime, t) for t in (out, a, b)]
    try:
        return entry(*handles)
    finally:
        for handle in handles:
            runtime.aoti_torch_delete_tensor_object(handle)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int8, torch.int16])
def test_the_runtime_makes_no_tensor_of_a_dtype_upstreams_refuses(runtime, dtype):
    """ExecuTorch's Metal runtime makes tensors of uint8, int32, int64, float32, bool and bfloat16 alone (utils.cpp:
    22-40): a program (or an adapter) never gets a float16 tensor on a Mac, and neither does it here."""
    with pytest.raises(program.ProgramError, match=f"Unsupported dtype: {program.DTYPE_CODES[dtype]}"):
        program.tensor_handle(runtime, torch.zeros(3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_msl_elementwise_adapter_called_directly_matches_aten(runtime, dtype):
    symbols = [shim.symbol for shim in _config().elementwise_msl_shims]
    if "aoti_torch_mps_logaddexp_out" not in symbols:
        pytest.skip(f"the example plugin is not installed: the registry's elementwise MSL shims are {symbols}")
    generator = torch.Generator().manual_seed(0)
    a = (torch.randn(7, 33, generator=generator) * 4).to(dtype)
    b = (torch.randn(7, 33, generator=generator) * 4).to(dtype)
    a[0, :4] = torch.tensor([float("inf"), float("-inf"), float("inf"), float("nan")], dtype=dtype)
    b[0, :4] = torch.tensor([float("inf"), float("-inf"), float("-inf"), 1.0], dtype=dtype)
    out = torch.full_like(a, 123.0)
    assert _logaddexp_out(runtime, out, a, b) == 0
    expected = torch.logaddexp(a.float(), b.float()).to(dtype)
    torch.testing.assert_close(out, expected, equal_nan=True, atol=0, rtol={torch.float32: 1e-6}.get(dtype, 1e-2))
    # every operand must be contiguous with out's shape and dtype: anything else is refused, out untouched
    out.fill_(123.0)
    assert _logaddexp_out(runtime, out, a[:, :1].contiguous(), b) != 0
    assert _logaddexp_out(runtime, out, a.t().contiguous().t(), b) != 0
    assert bool((out == 123.0).all())
    program.take_failure(runtime)
