// Whether a tensor's elements lie dense and row-major from its data pointer: what an MSL kernel that reads
// every operand by one element index needs. Header-only and templated on the tensor type, because the
// Metal runtime adapters that use it (over ExecuTorch's Tensor) are built without the SDK sources:
// any type with dim(), size(d) and strides() will do.
#pragma once

#include <cstdint>

namespace shimkit {

// Dimensions of size 1 may have any stride.
template <class Tensor>
bool is_contiguous(const Tensor& t) {
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    if (t.size(d) != 1 && t.strides()[d] != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

}  // namespace shimkit
