// The QR factorization A = Q R by Householder reflections, for ExecuTorch's Metal runtime
// (aoti_torch_mps_shimkit_qr, dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal on Linux
// (the plugin's launch_qr).
//
// LAPACK geqr2's algorithm, one thread per matrix, with dlarfg's reflector: for column j, alpha = W[j][j]
// and the norm of the entries below it; beta = -sign(alpha) * |(alpha, norm)| becomes R[j][j], and
// tau = (beta - alpha) / beta (tau = 0, no reflection, when the entries below are already zero), so R's
// diagonal carries LAPACK's signs and Q equals LAPACK's orgqr(Q) up to rounding. Q's first `q_columns`
// columns (min(m, n) for mode "reduced", m for "complete") are formed as org2r does, applying the
// reflectors backwards to the identity. `work` ([batch, m, n]) holds the reflectors below R and `tau`
// ([batch, min(m, n)]) their scales. `a`, `q` ([batch, m, q_columns]) and `r` ([batch, r_rows, n], r_rows =
// q_columns) are row-major and contiguous.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void qr(device T* q [[buffer(0)]],
               device T* r [[buffer(1)]],
               device T* work [[buffer(2)]],
               device T* tau [[buffer(3)]],
               constant T* a [[buffer(4)]],
               constant long& m [[buffer(5)]],
               constant long& n [[buffer(6)]],
               constant long& q_columns [[buffer(7)]],
               uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  const long k = m < n ? m : n;
  device T* W = work + matrix * m * n;
  device T* scale = tau + matrix * k;
  device T* Q = q + matrix * m * q_columns;
  device T* R = r + matrix * q_columns * n;
  constant T* A = a + matrix * m * n;
  for (long i = 0; i < m * n; ++i) {
    W[i] = A[i];
  }
  for (long j = 0; j < k; ++j) {
    const T alpha = W[j * n + j];
    T below = T(0);
    for (long i = j + 1; i < m; ++i) {
      below += W[i * n + j] * W[i * n + j];
    }
    if (below == T(0)) {
      scale[j] = T(0);
      continue;
    }
    const T norm = sqrt(alpha * alpha + below);
    const T beta = alpha >= T(0) ? -norm : norm;
    scale[j] = (beta - alpha) / beta;
    const T inverse = T(1) / (alpha - beta);
    for (long i = j + 1; i < m; ++i) {
      W[i * n + j] *= inverse;
    }
    W[j * n + j] = beta;
    // W[j:, j+1:] -= tau v (v^T W[j:, j+1:]), v = (1, W[j+1:, j]).
    for (long c = j + 1; c < n; ++c) {
      T dot = W[j * n + c];
      for (long i = j + 1; i < m; ++i) {
        dot += W[i * n + j] * W[i * n + c];
      }
      dot *= scale[j];
      W[j * n + c] -= dot;
      for (long i = j + 1; i < m; ++i) {
        W[i * n + c] -= dot * W[i * n + j];
      }
    }
  }
  for (long i = 0; i < q_columns; ++i) {
    for (long c = 0; c < n; ++c) {
      R[i * n + c] = (c >= i && i < m) ? W[i * n + c] : T(0);
    }
  }
  for (long i = 0; i < m; ++i) {
    for (long c = 0; c < q_columns; ++c) {
      Q[i * q_columns + c] = i == c ? T(1) : T(0);
    }
  }
  for (long j = k - 1; j >= 0; --j) {
    if (scale[j] == T(0)) {
      continue;
    }
    for (long c = j; c < q_columns; ++c) {
      T dot = Q[j * q_columns + c];
      for (long i = j + 1; i < m; ++i) {
        dot += W[i * n + j] * Q[i * q_columns + c];
      }
      dot *= scale[j];
      Q[j * q_columns + c] -= dot;
      for (long i = j + 1; i < m; ++i) {
        Q[i * q_columns + c] -= dot * W[i * n + j];
      }
    }
  }
}

template [[host_name("qr_float")]] kernel void qr<float>(
    device float*, device float*, device float*, device float*, constant float*, constant long&, constant long&,
    constant long&, uint);
