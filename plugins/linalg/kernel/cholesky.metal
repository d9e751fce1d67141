// Cholesky factorization A = L L^T of the lower triangle, for ExecuTorch's Metal runtime
// (aoti_torch_mps_shimkit_cholesky, dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal on
// Linux (the plugin's launch_cholesky).
//
// LAPACK potf2's algorithm, one thread per matrix, column by column: L[j][j] = sqrt(A[j][j] - |L[j][:j]|^2)
// and the column below it from dot products with the columns before. A diagonal that is not positive
// (or is NaN) stops the factorization there with `info` = j + 1 (1-based; 0 when A is positive-definite),
// leaving that entry as potf2 does. Only the lower triangle of `a` is read; `l`'s upper triangle is zero,
// as ATen returns it. `a` and `l` are [batch, n, n], row-major and contiguous.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void cholesky(device T* l [[buffer(0)]],
                     device int* info [[buffer(1)]],
                     constant T* a [[buffer(2)]],
                     constant long& n [[buffer(3)]],
                     uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  device T* L = l + matrix * n * n;
  constant T* A = a + matrix * n * n;
  for (long i = 0; i < n; ++i) {
    for (long c = 0; c < n; ++c) {
      L[i * n + c] = c <= i ? A[i * n + c] : T(0);
    }
  }
  int failed_at = 0;
  for (long j = 0; j < n; ++j) {
    T diagonal = L[j * n + j];
    for (long c = 0; c < j; ++c) {
      diagonal -= L[j * n + c] * L[j * n + c];
    }
    if (!(diagonal > T(0))) {
      L[j * n + j] = diagonal;
      failed_at = static_cast<int>(j + 1);
      break;
    }
    diagonal = sqrt(diagonal);
    L[j * n + j] = diagonal;
    for (long i = j + 1; i < n; ++i) {
      T sum = L[i * n + j];
      for (long c = 0; c < j; ++c) {
        sum -= L[i * n + c] * L[j * n + c];
      }
      L[i * n + j] = sum / diagonal;
    }
  }
  info[matrix] = failed_at;
}

template [[host_name("cholesky_float")]] kernel void cholesky<float>(
    device float*, device int*, constant float*, constant long&, uint);
