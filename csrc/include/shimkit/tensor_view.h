// A borrowed, libtorch-free description of one tensor argument.
//
// Kernels see tensors only through this view, so the same validation and reference code serves a
// libtorch at::Tensor, an ExecuTorch tensor (both read through the AOTI C accessor API) and a
// DLPack capsule from Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shimkit/c10_codes.h"
#include "shimkit/dtype.h"
#include "shimkit/status.h"

namespace shimkit {

// c10::DeviceType values, which aoti_torch_get_device_type returns.
enum class DeviceType : int32_t {
  kCPU = device_types::kCpu,
  kCUDA = device_types::kCuda,
  kMeta = device_types::kMeta,
  kMPS = device_types::kMps,
};

struct Device {
  DeviceType type = DeviceType::kCPU;
  int32_t index = 0;
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

std::string device_name(Device device);

struct TensorView {
  // Address of the element at index (0, ..., 0): the storage offset is already applied, as
  // aoti_torch_get_data_ptr returns it in libtorch and ExecuTorch alike.
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements; 0 marks a broadcast (expanded) dimension
  int64_t storage_offset = 0;    // in elements, as reported by the producer; informational
  Device device;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const;
  bool empty() const { return numel() == 0; }

  // "bfloat16[3, 4] strides [1, 3]": what error messages print for an argument.
  std::string describe() const;
};

// Checks what every kernel relies on: sizes and strides of equal rank, non-negative sizes, no data
// pointer missing for a non-empty tensor, and an element count and extent that fit in int64.
Status validate_view(const TensorView& view, const char* name);

std::string format_shape(const std::vector<int64_t>& sizes);

// Copies the elements of `src` in row-major order into the dense buffer `dst` (same dtype), and
// back. Graph devices that can only read dense buffers use these to feed a general strided operand.
void pack_dense(const TensorView& src, void* dst);
void unpack_dense(const void* src, const TensorView& dst);

}  // namespace shimkit
