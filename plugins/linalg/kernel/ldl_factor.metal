// The LDL^T factorization of a symmetric matrix given by its lower triangle, with Bunch-Kaufman pivoting,
// for ExecuTorch's Metal runtime (aoti_torch_mps_shimkit_ldl_factor, dispatched by linalg_shim_mps.mm) and,
// unchanged, for shimkit.metal on Linux (the plugin's launch_ldl_factor).
//
// LAPACK dsytf2's algorithm for UPLO = 'L', step for step, one thread per matrix: at column k, the
// diagonal entry is the pivot if it is at least alpha = (1 + sqrt(17)) / 8 times the largest entry below
// it; otherwise a 1x1 pivot from row imax, or a 2x2 pivot of rows k and imax, as dsytf2 chooses
// (the first largest entry wins ties, as idamax's); rows and columns are swapped in the trailing matrix and
// the rank-1 or rank-2 update follows. `pivots` holds LAPACK's ipiv (1-based; both entries of a 2x2 block
// negative), `info` the first zero 1x1 pivot (1-based; 0 when none), and `ld` L below the diagonal with D
// on and next to it, its strict upper triangle zero, as ATen returns LD. `a`, `ld` are [batch, n, n] and
// `pivots` [batch, n], row-major and contiguous.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void ldl_factor(device T* ld [[buffer(0)]],
                       device int* pivots [[buffer(1)]],
                       device int* info [[buffer(2)]],
                       constant T* a [[buffer(3)]],
                       constant long& n [[buffer(4)]],
                       uint index [[thread_position_in_grid]]) {
  const long matrix = index;
  device T* A = ld + matrix * n * n;
  device int* ipiv = pivots + matrix * n;
  constant T* source = a + matrix * n * n;
  for (long i = 0; i < n; ++i) {
    for (long j = 0; j < n; ++j) {
      A[i * n + j] = j <= i ? source[i * n + j] : T(0);
    }
  }
  const T alpha = (T(1) + sqrt(T(17))) / T(8);
  int first_zero = 0;
  long k = 0;
  while (k < n) {
    long kstep = 1;
    long kp = k;
    const T absakk = fabs(A[k * n + k]);
    long imax = k;
    T colmax = T(0);
    for (long i = k + 1; i < n; ++i) {
      if (fabs(A[i * n + k]) > colmax) {
        colmax = fabs(A[i * n + k]);
        imax = i;
      }
    }
    if (max(absakk, colmax) == T(0) || isnan(absakk)) {
      if (first_zero == 0) {
        first_zero = static_cast<int>(k + 1);
      }
      kp = k;
    } else {
      if (absakk >= alpha * colmax) {
        kp = k;
      } else {
        T rowmax = T(0);
        for (long j = k; j < imax; ++j) {
          rowmax = max(rowmax, fabs(A[imax * n + j]));
        }
        for (long j = imax + 1; j < n; ++j) {
          rowmax = max(rowmax, fabs(A[j * n + imax]));
        }
        if (absakk >= alpha * colmax * (colmax / rowmax)) {
          kp = k;
        } else if (fabs(A[imax * n + imax]) >= alpha * rowmax) {
          kp = imax;
        } else {
          kp = imax;
          kstep = 2;
        }
      }
      const long kk = k + kstep - 1;
      if (kp != kk) {
        for (long i = kp + 1; i < n; ++i) {
          const T x = A[i * n + kk];
          A[i * n + kk] = A[i * n + kp];
          A[i * n + kp] = x;
        }
        for (long j = kk + 1; j < kp; ++j) {
          const T x = A[j * n + kk];
          A[j * n + kk] = A[kp * n + j];
          A[kp * n + j] = x;
        }
        const T x = A[kk * n + kk];
        A[kk * n + kk] = A[kp * n + kp];
        A[kp * n + kp] = x;
        if (kstep == 2) {
          const T y = A[(k + 1) * n + k];
          A[(k + 1) * n + k] = A[kp * n + k];
          A[kp * n + k] = y;
        }
      }
      if (kstep == 1) {
        if (k < n - 1) {
          const T d11 = T(1) / A[k * n + k];
          for (long j = k + 1; j < n; ++j) {
            for (long i = j; i < n; ++i) {
              A[i * n + j] -= d11 * A[i * n + k] * A[j * n + k];
            }
          }
          for (long i = k + 1; i < n; ++i) {
            A[i * n + k] *= d11;
          }
        }
      } else if (k < n - 2) {
        T d21 = A[(k + 1) * n + k];
        const T d11 = A[(k + 1) * n + k + 1] / d21;
        const T d22 = A[k * n + k] / d21;
        const T t = T(1) / (d11 * d22 - T(1));
        d21 = t / d21;
        for (long j = k + 2; j < n; ++j) {
          const T wk = d21 * (d11 * A[j * n + k] - A[j * n + k + 1]);
          const T wkp1 = d21 * (d22 * A[j * n + k + 1] - A[j * n + k]);
          for (long i = j; i < n; ++i) {
            A[i * n + j] -= A[i * n + k] * wk + A[i * n + k + 1] * wkp1;
          }
          A[j * n + k] = wk;
          A[j * n + k + 1] = wkp1;
        }
      }
    }
    if (kstep == 1) {
      ipiv[k] = static_cast<int>(kp + 1);
    } else {
      ipiv[k] = -static_cast<int>(kp + 1);
      ipiv[k + 1] = -static_cast<int>(kp + 1);
    }
    k += kstep;
  }
  info[matrix] = first_zero;
}

template [[host_name("ldl_factor_float")]] kernel void ldl_factor<float>(
    device float*, device int*, device int*, constant float*, constant long&, uint);
