#!/usr/bin/env bash
# shimkit on a machine with a CUDA GPU and no network (docs/cuda.md).
#
#   tools/cuda_device.sh fetch         here, with network: the wheels the GPU machine lacks, into .cuda-wheels/
#                                       (git-ignored; about 23 MB)
#   tools/cuda_device.sh check [OUT]   there, with .cuda-wheels/ beside the checkout: install them and shimkit,
#                                       then lower the zoo and the CUDA repros stock and with shimkit, check the
#                                       numerics against eager CUDA and fail on any regression; reports in OUT
#   tools/cuda_device.sh tests [OUT]   there: shimkit's test suite once under the machine's torch, log in OUT
#   tools/cuda_device.sh bench [OUT]   there: benchmarks/bench_cuda_gemm.py (baddbmm decomposed or left to
#                                       Triton), its table in OUT
#
# The machine's own torch, triton and CUDA are used as they are: nothing here replaces them (--no-deps).
# CUDA_REUSE_SITE=1 keeps the install a previous subcommand made from the same checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHEELS=$ROOT/.cuda-wheels
SITE=${SHIMKIT_CUDA_SITE:-/tmp/shimkit-cuda-site}
PYTHON=${PYTHON:-python3}
# What ExecuTorch's lowering imports beyond a CUDA PyTorch image, at the versions CI tests (expecttest: an
# ExecuTorch dependency that torch's OpInfo test helpers import).
PINNED=(executorch==1.5.1 torchao==0.18.0 ruamel.yaml==0.19.1 ruamel.yaml.clib==0.2.15 expecttest==0.3.0
        transformers==4.57.6 huggingface_hub==0.36.2 tokenizers==0.22.2 hf-xet==1.8.0)

fetch() {
  mkdir -p "$WHEELS"
  local python_version
  python_version=${CUDA_PYTHON_VERSION:-3.12}
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "${PINNED[@]}"
  du -sh "$WHEELS"
}

install() {
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run 'tools/cuda_device.sh fetch' first" >&2; exit 2; }
  # One install serves several subcommands in a row (CUDA_REUSE_SITE=1) when it was made from this
  # very checkout; anything else installs afresh.
  local stamp
  stamp=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)-$(git -C "$ROOT" status --porcelain 2>/dev/null | md5sum | cut -c1-12)
  if [[ ${CUDA_REUSE_SITE:-0} != 1 || ! -f $SITE/.shimkit-stamp || $(cat "$SITE/.shimkit-stamp") != "$stamp" ]]; then
    rm -rf "$SITE" && mkdir -p "$SITE"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
    # shimkit itself, its extension built against the machine's torch and pybind11.
    PYTHONPATH=$SITE "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
      --target "$SITE" "$ROOT"
    echo "$stamp" > "$SITE/.shimkit-stamp"
  fi
  export PYTHONPATH=$SITE
  # The machine's torch is not a release CI tests; this path is the one exception (docs/cuda.md).
  export SHIMKIT_SKIP_VERSION_CHECK=1
  export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
  # Inductor compiles and links with $CXX. A $CXX that links libstdc++ statically (the GPU image's is a
  # wrapper around another g++ build) gives a wrapper.so whose own std::regex crashes when AOTInductor
  # loads it; shimkit.audit.aoti_process refuses such a package, and here the system g++ avoids it.
  if [[ -x /usr/bin/g++ ]]; then export CXX=/usr/bin/g++; fi
  "$PYTHON" -c 'import torch, executorch, shimkit; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
}

check() {
  local out=${1:-$ROOT/cuda-report}
  mkdir -p "$out"
  install
  # From outside the checkout: its top-level shimkit/ folder would shadow the installed package.
  cd /tmp
  "$PYTHON" "$ROOT/tools/cuda_checks.py" --out "$out" ${CUDA_CHECK_ARGS:-}
}

tests() {
  local out=${1:-$ROOT/cuda-report}
  mkdir -p "$out"
  install
  "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" \
    "$ROOT/tests/example_plugin"
  cd /tmp
  SHIMKIT_HYPOTHESIS_PROFILE=ci "$PYTHON" -m pytest -q -p no:cacheprovider -n "${CUDA_TEST_WORKERS:-8}" \
    --rootdir "$ROOT" -c "$ROOT/pyproject.toml" "$ROOT/tests" ${CUDA_TEST_ARGS:-} 2>&1 | tee -i "$out/tests.log"
}

bench() {
  local out=${1:-$ROOT/cuda-report}
  mkdir -p "$out"
  install
  cd /tmp
  "$PYTHON" "$ROOT/benchmarks/bench_cuda_gemm.py" ${CUDA_BENCH_ARGS:-} 2>&1 | tee "$out/bench_cuda_gemm.txt"
}

case "${1:-}" in
  fetch) fetch ;;
  check) shift; check "$@" ;;
  tests) shift; tests "$@" ;;
  bench) shift; bench "$@" ;;
  *) echo "usage: tools/cuda_device.sh {fetch|check [OUT]|tests [OUT]|bench [OUT]}" >&2; exit 2 ;;
esac
