// A X = B (or A^T X = B) from getrf's factors P A = L U, for ExecuTorch's Metal runtime
// (aoti_torch_mps_shimkit_lu_solve, dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal on
// Linux (the plugin's launch_lu_solve).
//
// LAPACK getrs's answer, one thread per column of B: the row swaps, the unit lower solve and the upper
// solve (for A^T: the transposed upper solve, the transposed unit lower solve, then the swaps undone in
// reverse order). `lu` is [batch, n, n], `pivots` [batch, n] (1-based), `b` and `x` [batch, n, k], all
// row-major and contiguous with the same batch.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void lu_solve(device T* x [[buffer(0)]],
                     constant T* lu [[buffer(1)]],
                     constant int* pivots [[buffer(2)]],
                     constant T* b [[buffer(3)]],
                     constant long& n [[buffer(4)]],
                     constant long& k [[buffer(5)]],
                     constant long& adjoint [[buffer(6)]],
                     uint index [[thread_position_in_grid]]) {
  const long matrix = index / k;
  const long column = index % k;
  constant T* A = lu + matrix * n * n;
  constant int* P = pivots + matrix * n;
  device T* X = x + matrix * n * k + column;
  constant T* B = b + matrix * n * k + column;
  for (long i = 0; i < n; ++i) {
    X[i * k] = B[i * k];
  }
  if (adjoint == 0) {
    for (long i = 0; i < n; ++i) {
      const long p = P[i] - 1;
      if (p != i) {
        const T swapped = X[i * k];
        X[i * k] = X[p * k];
        X[p * k] = swapped;
      }
    }
    for (long i = 0; i < n; ++i) {
      T sum = X[i * k];
      for (long j = 0; j < i; ++j) {
        sum -= A[i * n + j] * X[j * k];
      }
      X[i * k] = sum;
    }
    for (long i = n - 1; i >= 0; --i) {
      T sum = X[i * k];
      for (long j = i + 1; j < n; ++j) {
        sum -= A[i * n + j] * X[j * k];
      }
      X[i * k] = sum / A[i * n + i];
    }
  } else {
    for (long i = 0; i < n; ++i) {
      T sum = X[i * k];
      for (long j = 0; j < i; ++j) {
        sum -= A[j * n + i] * X[j * k];
      }
      X[i * k] = sum / A[i * n + i];
    }
    for (long i = n - 1; i >= 0; --i) {
      T sum = X[i * k];
      for (long j = i + 1; j < n; ++j) {
        sum -= A[j * n + i] * X[j * k];
      }
      X[i * k] = sum;
    }
    for (long i = n - 1; i >= 0; --i) {
      const long p = P[i] - 1;
      if (p != i) {
        const T swapped = X[i * k];
        X[i * k] = X[p * k];
        X[p * k] = swapped;
      }
    }
  }
}

template [[host_name("lu_solve_float")]] kernel void lu_solve<float>(
    device float*, constant float*, constant int*, constant float*, constant long&, constant long&,
    constant long&, uint);
