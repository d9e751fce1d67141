// LU factorization with partial pivoting, for ExecuTorch's Metal runtime (aoti_torch_mps_shimkit_lu_factor,
// dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal on Linux (the plugin's launch_lu_factor).
//
// LAPACK getf2's algorithm and answer, one thread per matrix: the models' matrices are small and batched,
// so a thread walks its own m x n matrix. For each column j: the pivot is the first row of largest
// magnitude (isamax), its 1-based index goes to `pivots`, the whole rows are swapped; a nonzero pivot
// scales the column below it (by its reciprocal where that is finite, as LAPACK does above FLT_MIN), a zero
// one records the first such column (1-based) in `info` and the factorization goes on; then the trailing
// block gets its rank-1 update. `lu` is row-major and contiguous, `a` too; `pivots` holds min(m, n) entries
// per matrix.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void lu_factor(device T* lu [[buffer(0)]],
                      device int* pivots [[buffer(1)]],
                      device int* info [[buffer(2)]],
                      constant T* a [[buffer(3)]],
                      constant long& m [[buffer(4)]],
                      constant long& n [[buffer(5)]],
                      uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  const long k = min(m, n);
  device T* A = lu + matrix * m * n;
  constant T* source = a + matrix * m * n;
  for (long e = 0; e < m * n; ++e) {
    A[e] = source[e];
  }
  int first_zero_pivot = 0;
  for (long j = 0; j < k; ++j) {
    long pivot_row = j;
    T largest = abs(A[j * n + j]);
    for (long i = j + 1; i < m; ++i) {
      const T magnitude = abs(A[i * n + j]);
      if (magnitude > largest) {
        largest = magnitude;
        pivot_row = i;
      }
    }
    pivots[matrix * k + j] = static_cast<int>(pivot_row + 1);
    if (A[pivot_row * n + j] != T(0)) {
      if (pivot_row != j) {
        for (long c = 0; c < n; ++c) {
          const T swapped = A[j * n + c];
          A[j * n + c] = A[pivot_row * n + c];
          A[pivot_row * n + c] = swapped;
        }
      }
      const T pivot = A[j * n + j];
      if (abs(pivot) >= FLT_MIN) {
        const T reciprocal = T(1) / pivot;
        for (long i = j + 1; i < m; ++i) {
          A[i * n + j] *= reciprocal;
        }
      } else {
        for (long i = j + 1; i < m; ++i) {
          A[i * n + j] /= pivot;
        }
      }
    } else if (first_zero_pivot == 0) {
      first_zero_pivot = static_cast<int>(j + 1);
    }
    for (long i = j + 1; i < m; ++i) {
      const T multiplier = A[i * n + j];
      for (long c = j + 1; c < n; ++c) {
        A[i * n + c] -= multiplier * A[j * n + c];
      }
    }
  }
  info[matrix] = first_zero_pivot;
}

template [[host_name("lu_factor_float")]] kernel void lu_factor<float>(
    device float*, device int*, device int*, constant float*, constant long&, constant long&, uint);
