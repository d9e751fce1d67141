"""The addmm plugin's Metal kernel (plugins/addmm/kernel/addmm_metal.mm), compiled unchanged against shimkit's
Objective-C runtime, Metal and MPSGraph on the CPU (objc/, issue 67) and run under AddressSanitizer, UBSan and
LeakSanitizer by tests/objc_programs/addmm_driver.mm: every case (float32, bfloat16, float16; transposed, packed and
broadcast feeds; beta = 0 with NaN in self; k = 0; buffer offsets through MPSNDArray; a graph-cache hit; an
NSException turned into a status; a dtype mismatch refused) must equal the plugin's reference kernel byte for byte.

Issue 67's part 3: the seed's three review bugs, each put back into a copy of the kernel's sources by a text edit,
must each fail here, in its own way, while the real sources pass:
- the graph cache keyed by self's rank instead of its shape: an [N] bias after a [1] bias reuses the [1] bias's
  graph, a wrong result;
- the call's Objective-C objects released only on the success path: the NSException case leaks them, which
  LeakSanitizer reports;
- no dtype check across operands: a bfloat16 mat2 is fed as float32, and the tensor data made for it raises (its
  buffer holds half the bytes), where the plan should have refused the call as a dtype mismatch.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import shimkit.plugins.addmm as addmm_plugin
from shimkit.objc.build import compile_objc, sanitizer_environment

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).parent / "objc_programs" / "addmm_driver.mm"
KERNEL = Path(addmm_plugin.KERNEL.directory)
KERNEL_SOURCES = ("addmm_metal.mm", "addmm_plan.cpp", "addmm_reference.cpp")
SDK_SOURCES = sorted((ROOT / "csrc" / "sdk").glob("*.cpp"))
CASES = ("f32_contiguous", "bf16_scaled_row_bias", "f16_scaled_column_bias", "bf16_larger",
         "f32_transposed_mat1_mat2", "bf16_transposed_out", "f16_transposed_self", "f32_packed_mat2",
         "bf16_packed_out", "f16_packed_self", "f32_scalar_bias", "bf16_broadcast_mat1", "f32_beta0_nan_self",
         "f16_k0", "f32_k0_beta0", "f32_empty_out", "f32_offsets_through_mpsndarray", "f16_offset_transposed_mat2",
         "f32_graph_cache_hit", "f32_bias_one", "f32_bias_n_after_bias_one", "dtype_mismatch",
         "nsexception_as_status")

# Each mutant: the file edited and its (old, new) text edits, each old text found exactly once.
MUTANTS = {
    "cache_key_holds_self_rank": ("addmm_plan.cpp", [(
        "    key.add_double(p.beta);\n    add_feed(key, p.self_feed);\n",
        "    key.add_double(p.beta);\n    key.add(static_cast<int64_t>(p.self_feed.kind)).add(ops.self.dim());\n")]),
    "objects_released_on_success_only": ("addmm_metal.mm", [
        ("  ~CallObjects() {\n", "  void release_all() {\n"),
        ("      status = Status::ok();\n", "      status = Status::ok();\n      call.release_all();\n")]),
    "no_dtype_check": ("addmm_plan.cpp", [("    if (others[i]->dtype != ops.mat1.dtype) {\n", "    if (false) {\n")]),
}


class Run:
    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.returncode, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr
        self.cases: dict[str, str] = {}
        for line in done.stdout.splitlines():
            if line.startswith("ok "):
                self.cases[line[3:]] = "ok"
            elif line.startswith("FAIL "):
                name, why = line[5:].split(": ", 1)
                self.cases[name] = why

    def __str__(self) -> str:
        return f"exit {self.returncode}\n{self.stdout[-4000:]}\n{self.stderr[-8000:]}"


def build_and_run(output: Path, mutated: Path | None = None) -> Run:
    """The driver with the kernel's sources, `mutated` in place of its namesake; the headers are the kernel's own
    (a mutant edits a source only), so every other object is the real build's, reused from the store."""
    kernel = [KERNEL / name for name in KERNEL_SOURCES]
    if mutated is not None:
        kernel = [mutated if path.name == mutated.name else path for path in kernel]
    program = compile_objc([DRIVER, *kernel, *SDK_SOURCES], output, executable=True, sanitize=True,
                           include_dirs=[str(KERNEL), str(ROOT / "csrc" / "include")])
    return Run(subprocess.run([str(program)], capture_output=True, text=True, env=sanitizer_environment(),
                              timeout=600))


def mutant_source(name: str, folder: Path) -> Path:
    """The kernel source mutant `name` edits, edited, in `folder`."""
    file, edits = MUTANTS[name]
    text = (KERNEL / file).read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{file} no longer holds the text mutant {name} edits: {old!r}"
        text = text.replace(old, new)
    (folder / file).write_text(text)
    return folder / file


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Run:
    return build_and_run(tmp_path_factory.mktemp("addmm-real") / "addmm_driver")


def test_real_kernel_runs_clean_under_the_sanitizers(real):
    assert real.returncode == 0, str(real)
    assert "Sanitizer" not in real.stderr and "runtime error" not in real.stderr, str(real)


@pytest.mark.parametrize("case", CASES)
def test_real_kernel_equals_the_reference(real, case):
    assert real.cases.get(case) == "ok", f"{case}: {real.cases.get(case, 'did not run')}\n{real}"


def test_every_case_is_listed(real):
    assert sorted(real.cases) == sorted(CASES)


def test_mutant_cache_key_holding_self_rank_gives_a_wrong_result(tmp_path):
    run = build_and_run(tmp_path / "driver", mutant_source("cache_key_holds_self_rank", tmp_path))
    assert run.cases["f32_bias_one"] == "ok", str(run)
    assert run.cases["f32_bias_n_after_bias_one"].startswith("run 1: a wrong result: out["), str(run)
    assert "Sanitizer" not in run.stderr, str(run)


def test_mutant_releasing_objects_on_success_only_leaks(tmp_path):
    run = build_and_run(tmp_path / "driver", mutant_source("objects_released_on_success_only", tmp_path))
    assert all(result == "ok" for result in run.cases.values()), str(run)
    assert run.returncode != 0 and "LeakSanitizer: detected memory leaks" in run.stderr, str(run)
    assert "MPSGraphTensorData" in run.stderr and "addmm_metal.mm" in run.stderr, str(run)


def test_mutant_without_dtype_check_fails_clearly(tmp_path):
    run = build_and_run(tmp_path / "driver", mutant_source("no_dtype_check", tmp_path))
    why = run.cases["dtype_mismatch"]
    assert why.startswith("expected invalid argument naming 'dtype mismatch', got internal error: MPSGraph raised "
                          "NSInvalidArgumentException: initWithMTLBuffer:shape:dataType: float32 [4, 5] needs 80 "
                          "bytes; the buffer has 40"), str(run)
    assert "Sanitizer" not in run.stderr, str(run)
