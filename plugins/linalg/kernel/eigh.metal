// Eigenvalues and eigenvectors of a symmetric matrix given by its lower triangle, for ExecuTorch's Metal
// runtime (aoti_torch_mps_shimkit_eigh, dispatched by linalg_shim_mps.mm) and, unchanged, for shimkit.metal
// on Linux (the plugin's launch_eigh).
//
// The cyclic Jacobi method, one thread per matrix: each rotation J zeroes one off-diagonal pair of the
// working copy W (W <- J^T W J) and is accumulated into the eigenvectors (V <- V J); sweeps repeat until
// every off-diagonal entry is negligible against both diagonal entries it couples (then it is set to 0),
// at most 64 sweeps (quadratic convergence needs far fewer). Eigenvalues come out ascending, as LAPACK's
// syevd gives them, and each eigenvector's sign is fixed so that its entry of largest magnitude (the first
// such) is positive: eigenvectors are unique only up to sign, and this is the canonical choice the
// plugin's shimkit::eigh documents on every device. A matrix that does not converge (NaN or infinite
// entries) gets info = n, which the decomposition turns into ATen's linalg.eigh error. `a` and `vectors`
// are [batch, n, n], `values` [batch, n], `work` [batch, n, n] scratch; all row-major and contiguous.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void eigh(device T* values [[buffer(0)]],
                 device T* vectors [[buffer(1)]],
                 device int* info [[buffer(2)]],
                 device T* work [[buffer(3)]],
                 constant T* a [[buffer(4)]],
                 constant long& n [[buffer(5)]],
                 uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  device T* W = work + matrix * n * n;
  device T* V = vectors + matrix * n * n;
  device T* lambda = values + matrix * n;
  constant T* A = a + matrix * n * n;
  for (long i = 0; i < n; ++i) {
    for (long j = 0; j < n; ++j) {
      W[i * n + j] = i >= j ? A[i * n + j] : A[j * n + i];
      V[i * n + j] = i == j ? T(1) : T(0);
    }
  }
  bool converged = false;
  for (int sweep = 0; sweep < 64 && !converged; ++sweep) {
    converged = true;
    for (long p = 0; p < n - 1; ++p) {
      for (long q = p + 1; q < n; ++q) {
        const T apq = W[p * n + q];
        const T app = W[p * n + p];
        const T aqq = W[q * n + q];
        if (apq == T(0)) {
          continue;
        }
        if (!isfinite(apq) || !isfinite(app) || !isfinite(aqq)) {
          converged = false;
          sweep = 64;
          break;
        }
        if (fabs(app) + T(100) * fabs(apq) == fabs(app) && fabs(aqq) + T(100) * fabs(apq) == fabs(aqq)) {
          W[p * n + q] = T(0);
          W[q * n + p] = T(0);
          continue;
        }
        converged = false;
        const T theta = (aqq - app) / (T(2) * apq);
        // t = tan of the rotation angle, the smaller root of t^2 + 2 theta t - 1 = 0; 1 / (2 theta) where
        // theta^2 would overflow.
        const T t = fabs(theta) > T(1e18) ? T(0.5) / theta
                                          : (theta >= T(0) ? T(1) : T(-1)) / (fabs(theta) + sqrt(theta * theta + T(1)));
        const T c = T(1) / sqrt(t * t + T(1));
        const T s = t * c;
        for (long k = 0; k < n; ++k) {
          const T wkp = W[k * n + p];
          const T wkq = W[k * n + q];
          W[k * n + p] = c * wkp - s * wkq;
          W[k * n + q] = s * wkp + c * wkq;
        }
        for (long k = 0; k < n; ++k) {
          const T wpk = W[p * n + k];
          const T wqk = W[q * n + k];
          W[p * n + k] = c * wpk - s * wqk;
          W[q * n + k] = s * wpk + c * wqk;
        }
        W[p * n + q] = T(0);
        W[q * n + p] = T(0);
        for (long k = 0; k < n; ++k) {
          const T vkp = V[k * n + p];
          const T vkq = V[k * n + q];
          V[k * n + p] = c * vkp - s * vkq;
          V[k * n + q] = s * vkp + c * vkq;
        }
      }
      if (!converged && sweep == 64) {
        break;
      }
    }
  }
  for (long i = 0; i < n; ++i) {
    lambda[i] = W[i * n + i];
  }
  for (long i = 0; i < n; ++i) {
    long smallest = i;
    for (long j = i + 1; j < n; ++j) {
      if (lambda[j] < lambda[smallest]) {
        smallest = j;
      }
    }
    if (smallest != i) {
      const T swapped = lambda[i];
      lambda[i] = lambda[smallest];
      lambda[smallest] = swapped;
      for (long k = 0; k < n; ++k) {
        const T v = V[k * n + i];
        V[k * n + i] = V[k * n + smallest];
        V[k * n + smallest] = v;
      }
    }
  }
  for (long j = 0; j < n; ++j) {
    long largest = 0;
    for (long k = 1; k < n; ++k) {
      if (fabs(V[k * n + j]) > fabs(V[largest * n + j])) {
        largest = k;
      }
    }
    if (V[largest * n + j] < T(0)) {
      for (long k = 0; k < n; ++k) {
        V[k * n + j] = -V[k * n + j];
      }
    }
  }
  info[matrix] = converged ? 0 : static_cast<int>(n);
}

template [[host_name("eigh_float")]] kernel void eigh<float>(
    device float*, device float*, device int*, device float*, constant float*, constant long&, uint);
