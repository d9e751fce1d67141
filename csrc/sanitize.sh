#!/usr/bin/env bash
# Runs the kernel test suite (tests/test_kernel_*.py), shimkit.metal's executor tests (semantics,
# PyTorch's Metal-library tests, MLX's convention and mlx-lm's kernels, the sort plugin's MSL kernel: their
# kernels built with the sanitizers too) and whole generated Metal programs (tests/test_metal_program*.py:
# the stand-in runtime and every plugin's adapter built with the sanitizers, shimkit.runtime.program) under
# AddressSanitizer and
# UndefinedBehaviorSanitizer:
#   bash csrc/sanitize.sh [PYTEST ARGS]
#   bash csrc/sanitize.sh --files      (the test files it runs, one per line: CI runs them only here)
# Builds shimkit._C and every registered kernel's host module (shimkit.testing.kernels) with
# -fsanitize=address,undefined -fno-sanitize-recover=all (any UB aborts the run) into
# the artifact store ($SHIMKIT_BUILD_DIR, default ~/.cache/shimkit: shimkit/store.py), loads that build in place of the installed
# shimkit._C (SHIMKIT_NATIVE_MODULE), and runs pytest with the ASan runtime preloaded, because the
# Python interpreter itself is not instrumented. Leak detection is off: CPython and libtorch keep
# allocations alive until exit by design, which would drown real reports.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"

cd "$ROOT"
# As ./dev: cached bytecode even where the host turns it off, or each process compiles torch from source.
unset PYTHONDONTWRITEBYTECODE
SANITIZED_TESTS=(tests/test_kernel_*.py tests/test_metal_semantics.py tests/test_metal_fiber_switch.py
  tests/test_metal_torch_ports.py tests/test_metal_mlx_convention.py tests/test_metal_mlx_lm_kernels.py
  tests/test_plugin_sort.py tests/test_metal_program.py tests/test_metal_program_adapters.py)
if [[ "${1:-}" == "--files" ]]; then
  printf '%s\n' "${SANITIZED_TESTS[@]}"
  exit 0
fi

# The sanitizer runtimes preloaded below must be those of the compiler that builds the sanitized code.
compiler_line="$("$PY" -m shimkit.csrc compiler)"
eval "compiler=($compiler_line)"

# The two builds are independent compiler runs: side by side, one per core.
SHIMKIT_SANITIZE=1 "$PY" -m shimkit.testing.kernels >/dev/null &
kernels=$!
module="$("$PY" -m shimkit.csrc sanitized-module)"
wait "$kernels"

export SHIMKIT_NATIVE_MODULE="$module"
export SHIMKIT_SANITIZE=1
export LD_PRELOAD="$("${compiler[@]}" -print-file-name=libasan.so) $("${compiler[@]}" -print-file-name=libubsan.so)"
# The compilers the tests start (MSL libraries, runtimes, whole programs) would inherit LD_PRELOAD and run
# with the ASan allocator under every allocation: ~40% more CPU, for nothing under test. $CXX becomes a
# wrapper that runs the same compiler without it (named as it, for tools that recognise gcc by name; kept
# in the build folder at a stable path, because build digests include the compiler command).
wrapper="$(dirname "$(dirname "$(dirname "$module")")")/compiler-without-preload/$(basename "${compiler[0]}")"
mkdir -p "$(dirname "$wrapper")"
printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$compiler_line" > "$wrapper.$$"
chmod +x "$wrapper.$$"
mv -f "$wrapper.$$" "$wrapper"
export CXX="$wrapper"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_odr_violation=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
exec "$PY" -m pytest -q -p no:cacheprovider "${SANITIZED_TESTS[@]}" "$@"
