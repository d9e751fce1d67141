// The coordinates of the nonzero elements, in row-major order of the elements, for ExecuTorch's Metal runtime
// (aoti_torch_mps_nonzero, dispatched by nonzero_shim_mps.mm) and, unchanged, for shimkit.metal on Linux (the
// plugin's launch_nonzero).
//
// Two dispatches of the same kernel, one thread per element, no atomics and no scratch memory: each thread
// counts the nonzero elements before it (O(n) per thread: right for the masks and index tensors models
// take `nonzero` of, slow for millions of elements). With `write` == 0 only the last thread stores the
// total, which the host reads to allocate [total, ndim] with strides (1, total), the layout ATen's nonzero
// returns on every device and Inductor's code after the call assumes; with `write` == 1 each nonzero thread
// writes its coordinates to its row, a column per dimension. NaN is nonzero and -0.0 is zero, as in ATen.
// `input` is contiguous; `sizes` holds its ndim sizes.
#include <metal_stdlib>
using namespace metal;

template <typename T>
inline bool is_nonzero(T x) {
  return x != T(0);
}
inline bool is_nonzero(bfloat x) {
  return static_cast<float>(x) != 0.0f;
}

template <typename T>
kernel void nonzero(device long* coordinates [[buffer(0)]],
                    device long* total [[buffer(1)]],
                    constant T* input [[buffer(2)]],
                    constant long* sizes [[buffer(3)]],
                    constant long& ndim [[buffer(4)]],
                    constant long& numel [[buffer(5)]],
                    constant long& write [[buffer(6)]],
                    uint index [[thread_position_in_grid]]) {
  const long element = index;
  long before = 0;
  for (long k = 0; k < element; ++k) {
    before += is_nonzero(input[k]) ? 1 : 0;
  }
  const bool here = is_nonzero(input[element]);
  if (write == 0) {
    if (element == numel - 1) {
      total[0] = before + (here ? 1 : 0);
    }
    return;
  }
  if (!here) {
    return;
  }
  const long rows = total[0];
  long rest = element;
  for (long d = ndim - 1; d >= 0; --d) {
    coordinates[d * rows + before] = rest % sizes[d];
    rest /= sizes[d];
  }
}

#define INSTANTIATE_NONZERO(T)                                                                             \
  template [[host_name("nonzero_" #T)]] kernel void nonzero<T>(device long*, device long*, constant T*,    \
                                                               constant long*, constant long&,             \
                                                               constant long&, constant long&, uint)

INSTANTIATE_NONZERO(float);
INSTANTIATE_NONZERO(half);
INSTANTIATE_NONZERO(bfloat);
INSTANTIATE_NONZERO(long);
INSTANTIATE_NONZERO(int);
INSTANTIATE_NONZERO(short);
INSTANTIATE_NONZERO(char);
INSTANTIATE_NONZERO(uchar);
INSTANTIATE_NONZERO(bool);
