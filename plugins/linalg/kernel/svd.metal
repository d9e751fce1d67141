// The thin singular value decomposition A = U diag(S) Vh of a tall matrix (m >= n), for ExecuTorch's Metal
// runtime (aoti_torch_mps_shimkit_svd, dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal on
// Linux (the plugin's launch_svd). Wide matrices are decomposed as their transpose by the caller.
//
// One-sided Jacobi (Hestenes), one thread per matrix: plane rotations of pairs of columns of U (a copy of
// A), accumulated into V, until every pair is orthogonal to FLT_EPSILON relative to the columns' norms
// (at most 64 sweeps); the column norms are then the singular values and the normalized columns U's. The
// singular values come out descending, as LAPACK gives them. A zero singular value leaves its column of U
// undetermined: it is completed with the unit vector least in the span of the columns before it,
// orthogonalized against them, so that U stays orthonormal. Each pair of singular vectors is unique only up
// to a common sign: the canonical one makes the entry of largest magnitude (the first such) of each column
// of U positive, as shimkit::svd documents on every device. Non-finite entries give info = n (no
// convergence), 0 otherwise. `a` is [batch, m, n], `u` [batch, m, n], `s` [batch, n] and `vh` [batch, n, n];
// all row-major and contiguous.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void svd(device T* u [[buffer(0)]],
                device T* s [[buffer(1)]],
                device T* vh [[buffer(2)]],
                device int* info [[buffer(3)]],
                constant T* a [[buffer(4)]],
                constant long& m [[buffer(5)]],
                constant long& n [[buffer(6)]],
                uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  device T* U = u + matrix * m * n;
  device T* V = vh + matrix * n * n;
  device T* sigma = s + matrix * n;
  constant T* A = a + matrix * m * n;
  bool finite = true;
  for (long i = 0; i < m * n; ++i) {
    U[i] = A[i];
    finite = finite && isfinite(A[i]);
  }
  for (long i = 0; i < n; ++i) {
    for (long j = 0; j < n; ++j) {
      V[i * n + j] = i == j ? T(1) : T(0);
    }
  }
  bool converged = finite;
  for (int sweep = 0; sweep < 64 && finite; ++sweep) {
    bool rotated = false;
    for (long p = 0; p < n - 1; ++p) {
      for (long q = p + 1; q < n; ++q) {
        T alpha = T(0), beta = T(0), gamma = T(0);
        for (long i = 0; i < m; ++i) {
          const T up = U[i * n + p];
          const T uq = U[i * n + q];
          alpha += up * up;
          beta += uq * uq;
          gamma += up * uq;
        }
        if (gamma == T(0) || fabs(gamma) <= FLT_EPSILON * sqrt(alpha) * sqrt(beta)) {
          continue;
        }
        rotated = true;
        const T zeta = (beta - alpha) / (T(2) * gamma);
        // t = tan of the rotation angle, the smaller root of t^2 + 2 zeta t - 1 = 0; 1 / (2 zeta) where
        // zeta^2 would overflow.
        const T t = fabs(zeta) > T(1e18) ? T(0.5) / zeta
                                         : (zeta >= T(0) ? T(1) : T(-1)) / (fabs(zeta) + sqrt(T(1) + zeta * zeta));
        const T c = T(1) / sqrt(T(1) + t * t);
        const T sine = c * t;
        for (long i = 0; i < m; ++i) {
          const T up = U[i * n + p];
          const T uq = U[i * n + q];
          U[i * n + p] = c * up - sine * uq;
          U[i * n + q] = sine * up + c * uq;
        }
        for (long i = 0; i < n; ++i) {
          const T vp = V[i * n + p];
          const T vq = V[i * n + q];
          V[i * n + p] = c * vp - sine * vq;
          V[i * n + q] = sine * vp + c * vq;
        }
      }
    }
    if (!rotated) {
      break;
    }
    converged = sweep < 63;
  }
  for (long j = 0; j < n; ++j) {
    T norm = T(0);
    for (long i = 0; i < m; ++i) {
      norm += U[i * n + j] * U[i * n + j];
    }
    sigma[j] = sqrt(norm);
  }
  for (long j = 0; j < n; ++j) {
    long largest = j;
    for (long k = j + 1; k < n; ++k) {
      if (sigma[k] > sigma[largest]) {
        largest = k;
      }
    }
    if (largest != j) {
      const T swapped = sigma[j];
      sigma[j] = sigma[largest];
      sigma[largest] = swapped;
      for (long i = 0; i < m; ++i) {
        const T x = U[i * n + j];
        U[i * n + j] = U[i * n + largest];
        U[i * n + largest] = x;
      }
      for (long i = 0; i < n; ++i) {
        const T x = V[i * n + j];
        V[i * n + j] = V[i * n + largest];
        V[i * n + largest] = x;
      }
    }
  }
  for (long j = 0; j < n; ++j) {
    if (sigma[j] > T(0)) {
      for (long i = 0; i < m; ++i) {
        U[i * n + j] /= sigma[j];
      }
      continue;
    }
    // Completion: the unit vector e_t whose residual 1 - sum_k U[t][k]^2 against the columns before is
    // largest, orthogonalized twice against them (classical Gram-Schmidt, repeated for accuracy).
    long chosen = 0;
    T best = T(-1);
    for (long t = 0; t < m; ++t) {
      T residual = T(1);
      for (long k = 0; k < j; ++k) {
        residual -= U[t * n + k] * U[t * n + k];
      }
      if (residual > best) {
        best = residual;
        chosen = t;
      }
    }
    for (long i = 0; i < m; ++i) {
      U[i * n + j] = i == chosen ? T(1) : T(0);
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (long k = 0; k < j; ++k) {
        T dot = T(0);
        for (long i = 0; i < m; ++i) {
          dot += U[i * n + k] * U[i * n + j];
        }
        for (long i = 0; i < m; ++i) {
          U[i * n + j] -= dot * U[i * n + k];
        }
      }
    }
    T norm = T(0);
    for (long i = 0; i < m; ++i) {
      norm += U[i * n + j] * U[i * n + j];
    }
    norm = sqrt(norm);
    for (long i = 0; i < m; ++i) {
      U[i * n + j] /= norm;
    }
  }
  for (long j = 0; j < n; ++j) {
    long largest = 0;
    for (long i = 1; i < m; ++i) {
      if (fabs(U[i * n + j]) > fabs(U[largest * n + j])) {
        largest = i;
      }
    }
    if (U[largest * n + j] < T(0)) {
      for (long i = 0; i < m; ++i) {
        U[i * n + j] = -U[i * n + j];
      }
      for (long i = 0; i < n; ++i) {
        V[i * n + j] = -V[i * n + j];
      }
    }
  }
  for (long i = 0; i < n; ++i) {
    for (long j = i + 1; j < n; ++j) {
      const T x = V[i * n + j];
      V[i * n + j] = V[j * n + i];
      V[j * n + i] = x;
    }
  }
  info[matrix] = converged ? 0 : static_cast<int>(n);
}

template [[host_name("svd_float")]] kernel void svd<float>(
    device float*, device float*, device float*, device int*, constant float*, constant long&, constant long&,
    uint);
