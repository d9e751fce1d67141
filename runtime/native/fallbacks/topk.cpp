// Stands in for the Metal runtime's op_topk.mm: aoti_torch_mps_topk returns the k largest (or
// smallest) elements along `dim` and their int64 indices, as two new contiguous tensors.
//
// Order as ATen's CPU topk: NaN counts as larger than every number (first when largest, last when
// smallest), values descend (ascend) and equal values keep their index order, which is one of the
// orders ATen may return. `sorted` is accepted and ignored like upstream, whose results are always
// sorted (an unsorted topk has no promised order). Rejected like upstream: dtypes other than float32
// and bfloat16, a dim out of range, k outside [0, size]. A 0-d input is taken as ATen takes it (upstream
// rejects every dim for it).
#include <algorithm>
#include <cmath>

#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

Status topk(AtenTensorHandle self_handle, int64_t k, int64_t dim, int32_t largest, AtenTensorHandle* ret0,
            AtenTensorHandle* ret1) {
  if (ret0 == nullptr || ret1 == nullptr) return invalid("ret0 and ret1 must not be null");
  Arg self;
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(self));
  const int64_t rank = self.dim();
  const int64_t wrap = rank > 0 ? rank : 1;  // a 0-d tensor has the one dim 0 (or -1), as in ATen
  if (dim < -wrap || dim >= wrap) {
    return invalid("dim " + std::to_string(dim) + " is out of range for self of rank " + std::to_string(rank));
  }
  if (dim < 0) dim += wrap;
  const int64_t length = rank > 0 ? self.size(dim) : 1;
  if (k < 0 || k > length) {
    return invalid("k=" + std::to_string(k) + " is out of range: self has " + std::to_string(length) +
                   " elements along dim " + std::to_string(dim));
  }

  std::vector<int64_t> out_sizes = self.view.sizes;
  if (rank > 0) out_sizes[static_cast<std::size_t>(dim)] = k;
  Result values, indices;
  SHIMKIT_RETURN_IF_ERROR(allocate(self, out_sizes, self.code, "values", &values));
  SHIMKIT_RETURN_IF_ERROR(allocate(self, out_sizes, int64_code(), "indices", &indices));

  if (rank == 0) {
    // ATen returns the element itself, whatever k (0 or 1) was.
    values.arg.store(0, self.load(0));
    static_cast<int64_t*>(indices.arg.view.data)[0] = 0;
  } else {
    // Every row along `dim`: the other dims index the rows.
    std::vector<int64_t> row_sizes = self.view.sizes;
    row_sizes[static_cast<std::size_t>(dim)] = 1;
    const int64_t self_step = self.stride(dim);
    const int64_t values_step = values.arg.stride(dim);
    const int64_t indices_step = indices.arg.stride(dim);
    std::vector<std::pair<float, int64_t>> row(static_cast<std::size_t>(length));
    // NaN ranks above everything; ties go to the smaller index.
    auto before = [largest](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
      const bool a_nan = std::isnan(a.first), b_nan = std::isnan(b.first);
      if (a_nan || b_nan) {
        if (a_nan && b_nan) return a.second < b.second;
        return largest ? a_nan : b_nan;
      }
      if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
      return a.second < b.second;
    };
    auto* index_data = static_cast<int64_t*>(indices.arg.view.data);
    for_each_index(row_sizes, [&](int64_t, const std::vector<int64_t>& at) {
      const int64_t base = offset_of(at, self.view.strides);
      for (int64_t i = 0; i < length; ++i) row[static_cast<std::size_t>(i)] = {self.load(base + i * self_step), i};
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
      const int64_t values_base = offset_of(at, values.arg.view.strides);
      const int64_t indices_base = offset_of(at, indices.arg.view.strides);
      for (int64_t i = 0; i < k; ++i) {
        values.arg.store(values_base + i * values_step, row[static_cast<std::size_t>(i)].first);
        index_data[indices_base + i * indices_step] = row[static_cast<std::size_t>(i)].second;
      }
    });
  }
  return hand_over(&values, ret0, &indices, ret1);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
                                                     int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  (void)sorted;
  return shimkit::metal_fallbacks::run("aoti_torch_mps_topk", [&] {
    return shimkit::metal_fallbacks::topk(self, k, dim, largest, ret0, ret1);
  });
}

}  // extern "C"
