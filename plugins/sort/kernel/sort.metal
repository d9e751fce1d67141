// Stable sort along one dimension, for ExecuTorch's Metal runtime (aoti_torch_mps_sort_stable, dispatched
// by sort_shim_mps.mm) and, unchanged, for shimkit.metal on Linux (the plugin's launch_sort).
//
// A rank sort: one thread per element counts the elements of its row that sort before it and writes
// itself to that position. Every thread is independent (no barriers, no scratch memory) and the result
// is stable by construction, because ties are broken by the original position. The cost is O(n) per
// thread, O(n^2) per row: right for the short rows models sort (top-k candidates, routing, argsort of a
// sequence), slow for rows of many thousands.
//
// ATen's order: NaN sorts after every number ascending and before every number descending; NaNs tie
// with each other, as do -0.0 and 0.0; ties keep their original order in both directions.
//
// The input is contiguous and viewed as [outer, size, inner] around the sorted dimension: element k of
// a row is `inner` elements after element k-1.
#include <metal_stdlib>
using namespace metal;

template <typename T>
inline bool is_nan(T) {
  return false;
}
inline bool is_nan(float x) {
  return isnan(x);
}
inline bool is_nan(half x) {
  return isnan(x);
}
inline bool is_nan(bfloat x) {
  return isnan(static_cast<float>(x));
}

// Whether `a` (at position i of its row) sorts before `b` (at position j).
template <typename T>
inline bool sorts_before(T a, long i, T b, long j, bool descending) {
  const bool a_nan = is_nan(a);
  const bool b_nan = is_nan(b);
  const bool less = a_nan || b_nan ? (!a_nan && b_nan) : a < b;
  const bool greater = a_nan || b_nan ? (a_nan && !b_nan) : b < a;
  if (less || greater) {
    return descending ? greater : less;
  }
  return i < j;
}

template <typename T>
kernel void sort_stable(device T* values [[buffer(0)]],
                        device long* indices [[buffer(1)]],
                        constant T* input [[buffer(2)]],
                        constant long& size [[buffer(3)]],
                        constant long& inner [[buffer(4)]],
                        constant long& descending [[buffer(5)]],
                        uint index [[thread_position_in_grid]]) {
  const long element = index;
  const long row_length = size * inner;
  const long position = (element / inner) % size;
  const long row_start = (element / row_length) * row_length + element % inner;
  const T value = input[element];
  long rank = 0;
  for (long k = 0; k < size; ++k) {
    rank += sorts_before(input[row_start + k * inner], k, value, position, descending != 0) ? 1 : 0;
  }
  values[row_start + rank * inner] = value;
  indices[row_start + rank * inner] = position;
}

#define INSTANTIATE_SORT(T)                                                                              \
  template [[host_name("sort_stable_" #T)]] kernel void sort_stable<T>(                                \
      device T*, device long*, constant T*, constant long&, constant long&, constant long&, uint)

INSTANTIATE_SORT(float);
INSTANTIATE_SORT(half);
INSTANTIATE_SORT(bfloat);
INSTANTIATE_SORT(long);
INSTANTIATE_SORT(int);
INSTANTIATE_SORT(short);
INSTANTIATE_SORT(char);
INSTANTIATE_SORT(uchar);
