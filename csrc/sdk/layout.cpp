#include "shimkit/layout.h"

namespace shimkit {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kTransposed:
      return "transposed";
    case Layout::kBroadcast:
      return "broadcast";
    case Layout::kStrided:
      return "strided";
  }
  return "unknown";
}

namespace {

bool is_row_major_dense(const TensorView& view) {
  int64_t expected = 1;
  for (int64_t d = view.dim() - 1; d >= 0; --d) {
    if (view.sizes[d] == 1) continue;  // a size-1 dimension is never stepped over
    if (view.strides[d] != expected) return false;
    expected *= view.sizes[d];
  }
  return true;
}

}  // namespace

Layout classify_layout(const TensorView& view) {
  if (view.empty()) return Layout::kContiguous;
  for (int64_t d = 0; d < view.dim(); ++d) {
    if (view.sizes[d] > 1 && view.strides[d] == 0) return Layout::kBroadcast;
  }
  if (is_row_major_dense(view)) return Layout::kContiguous;
  // Row-major density already covers matrices with a size-1 side, so both sides exceed 1 here.
  if (view.dim() == 2 && view.strides[0] == 1 && view.strides[1] == view.sizes[0]) {
    return Layout::kTransposed;
  }
  return Layout::kStrided;
}

std::vector<int64_t> unbroadcast_sizes(const TensorView& view) {
  std::vector<int64_t> sizes = view.sizes;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (view.strides[d] == 0 && sizes[d] > 1) sizes[d] = 1;
  }
  return sizes;
}

TensorView unbroadcast(const TensorView& view) {
  TensorView reduced = view;
  reduced.sizes = unbroadcast_sizes(view);
  return reduced;
}

}  // namespace shimkit
