#include "shimkit/tensor_view.h"

#include <cstring>
#include <limits>

namespace shimkit {

std::string device_name(Device device) {
  switch (device.type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda:" + std::to_string(device.index);
    case DeviceType::kMeta:
      return "meta";
    case DeviceType::kMPS:
      return "mps:" + std::to_string(device.index);
  }
  return "device type " + std::to_string(static_cast<int32_t>(device.type));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t size : sizes) n *= size;
  return n;
}

std::string format_shape(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "]";
}

std::string TensorView::describe() const {
  return std::string(dtype_name(dtype)) + format_shape(sizes) + " strides " + format_shape(strides);
}

Status validate_view(const TensorView& view, const char* name) {
  if (view.sizes.size() != view.strides.size()) {
    return Status::invalid_argument(std::string(name) + " has " + std::to_string(view.sizes.size()) +
                                    " sizes but " + std::to_string(view.strides.size()) + " strides");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t numel = 1;
  bool empty = false;
  for (std::size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] < 0) {
      return Status::invalid_argument(std::string(name) + " has a negative size: " +
                                      format_shape(view.sizes));
    }
    empty = empty || view.sizes[d] == 0;
  }
  if (empty) return Status::ok();
  // Every offset a kernel computes is a sum of (size - 1) * |stride| terms; keep it in range.
  int64_t extent = 0;
  for (std::size_t d = 0; d < view.sizes.size(); ++d) {
    int64_t size = view.sizes[d];
    int64_t stride = view.strides[d];
    int64_t magnitude = stride < 0 ? (stride == std::numeric_limits<int64_t>::min() ? kMax : -stride)
                                   : stride;
    if (numel > kMax / size || (size > 1 && magnitude > (kMax - extent) / (size - 1))) {
      return Status::invalid_argument(std::string(name) + " is too large to index: " + view.describe());
    }
    numel *= size;
    extent += (size - 1) * magnitude;
  }
  if (view.data == nullptr) {
    return Status::invalid_argument(std::string(name) + " has no data (null data pointer) but " +
                                    std::to_string(numel) + " elements");
  }
  return Status::ok();
}

namespace {

// Visits every element of `view` in row-major order with its offset (in elements) from view.data.
template <class Fn>
void for_each_offset(const TensorView& view, Fn&& fn) {
  if (view.empty()) return;
  const std::size_t rank = view.sizes.size();
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t linear = 0;; ++linear) {
    fn(linear, offset);
    std::size_t d = rank;
    while (d > 0) {
      --d;
      if (++index[d] < view.sizes[d]) {
        offset += view.strides[d];
        break;
      }
      offset -= (view.sizes[d] - 1) * view.strides[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

}  // namespace

void pack_dense(const TensorView& src, void* dst) {
  const std::size_t item = element_size(src.dtype);
  const char* from = static_cast<const char*>(src.data);
  char* to = static_cast<char*>(dst);
  for_each_offset(src, [&](int64_t linear, int64_t offset) {
    std::memcpy(to + linear * item, from + offset * static_cast<int64_t>(item), item);
  });
}

void unpack_dense(const void* src, const TensorView& dst) {
  const std::size_t item = element_size(dst.dtype);
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst.data);
  for_each_offset(dst, [&](int64_t linear, int64_t offset) {
    std::memcpy(to + offset * static_cast<int64_t>(item), from + linear * item, item);
  });
}

}  // namespace shimkit
