// The aoti_torch_* tensor functions of a Metal program, over host memory: what ExecuTorch's Metal runtime
// (backends/aoti/common_shims.cpp, backends/apple/metal/runtime/shims/memory.cpp) provides on a Mac, here
// for Linux. A handle is an ExecuTorch etensor::Tensor*, as there, so that the plugins' adapters
// (which read tensors through etensor::Tensor's methods) run unchanged. Like upstream, a tensor's
// storage offset is folded into its data pointer (ExecuTorch tensors have none) and "device" memory is
// host memory: the device type a tensor was created with is remembered and reported back.
//
// Where upstream's memory.cpp (pytorch/executorch cff6f4d) does otherwise than ATen, this does what it does:
// - empty_strided allocates numel * element size bytes whatever the strides (:147-166), fails a zero-size "device"
//   allocation (et_metal.mm:209-213) and leaves the memory unwritten (a pooled buffer holds what it last held): here
//   it is filled with all-ones bytes (NaN, -1), so a read of it shows; strides spanning more than numel elements are
//   refused, as they would be written past the allocation's end;
// - copy_ copies src's bytes from its data pointer when the strides are equal (:325-356) and refuses other layouts,
//   other dtypes and other element counts with upstream's messages (:296-313, :361-363), and an empty copy (et_metal.mm:
//   295-298); equal strides with holes copy the wrong bytes there, a divergence here.
// - _reinterpret_tensor copies a view with holes into a new contiguous buffer at the call (:530-561), which Inductor's
//   kernels then index with the view's strides, past the copy's end: here the view stays a view, and the call is a
//   divergence (reproducing the copy would write past it on the CPU).
//
// Every handle this runtime hands out is registered: a handle it does not know (freed twice, or never
// made here) is an error naming the function, never a read of freed memory. shimkit_runtime_live_tensors()
// lets tests prove a program frees everything it allocates.

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/tensor_attribute.h>

#include "shimkit/objc_hooks.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime_errors.h"
#include "shimkit/c10_codes.h"

namespace {

using executorch::runtime::Error;
using executorch::runtime::etensor::ScalarType;
using executorch::runtime::etensor::Tensor;
using executorch::runtime::etensor::TensorImpl;
using namespace shimkit::scalar_types;
using shimkit::device_types::kCpu;
using shimkit::device_types::kCuda;
using shimkit::device_types::kMps;
using shimkit::metal_runtime::guarded;

extern "C" void shimkit_runtime_record_divergence(const char* symbol, const char* behaviour, const char* detail);

struct Storage {
  void* data = nullptr;
  bool owned = false;
  ~Storage() {
    if (owned) std::free(data);
  }
};

struct HostTensor {
  std::shared_ptr<Storage> storage;  // keeps an allocation alive while a view of it lives
  int32_t dtype = 0;
  int32_t device_type = kMps;
  int32_t device_index = 0;
  std::vector<int32_t> sizes32, strides32;
  std::vector<uint8_t> dim_order;
  std::vector<int64_t> sizes, strides;
  std::unique_ptr<TensorImpl> impl;
  std::unique_ptr<Tensor> tensor;
};

std::mutex registry_mutex;
std::unordered_map<Tensor*, std::unique_ptr<HostTensor>>& registry() {
  static auto* tensors = new std::unordered_map<Tensor*, std::unique_ptr<HostTensor>>();
  return *tensors;
}

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kUInt8: case kInt8: case kBool: return 1;
    case kInt16: case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: case kComplex64: return 8;
    case kComplex128: return 16;
    default: return 0;
  }
}

std::string dtype_text(int32_t dtype) { return "dtype code " + std::to_string(dtype); }

// The dtypes ExecuTorch's Metal runtime makes tensors of (utils.cpp:22-33 at cff6f4d): uint8, int32, int64, float32,
// bool and bfloat16. Upstream refuses any other where it makes, copies or views a tensor (memory.cpp:80, 153,
// 291-293, 499, 636), float16 among them, with this message.
void validate_dtype(int32_t dtype) {
  switch (dtype) {
    case kUInt8: case kInt32: case kInt64: case kFloat32: case kBool: case kBFloat16:
      return;
    default:
      throw std::invalid_argument("Unsupported dtype: " + std::to_string(dtype) +
                                  " (ExecuTorch's Metal runtime makes tensors of uint8, int32, int64, float32, bool "
                                  "and bfloat16 alone: utils.cpp:22-40)");
  }
}

HostTensor& find(Tensor* handle, const char* function) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(handle);
  if (handle == nullptr || it == registry().end()) {
    throw std::invalid_argument(std::string(function) + ": " +
                                (handle == nullptr ? "null tensor handle"
                                                   : "not a live tensor handle of this runtime (deleted already?)"));
  }
  return *it->second;
}

// Elements spanned by a layout: 1 + sum((size - 1) * stride), 0 for an empty tensor.
int64_t extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    span += (sizes[d] - 1) * strides[d];
  }
  return span;
}

// The bytes a tensor's layout reaches from its data pointer.
size_t spanned_bytes(const HostTensor& host) {
  return static_cast<size_t>(extent(host.sizes, host.strides)) * element_size(host.dtype);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

Tensor* make_tensor(std::shared_ptr<Storage> storage, void* data, std::vector<int64_t> sizes,
                    std::vector<int64_t> strides, int32_t dtype, int32_t device_type, int32_t device_index,
                    const char* function) {
  if (element_size(dtype) == 0) throw std::invalid_argument(std::string(function) + ": unsupported " + dtype_text(dtype));
  const size_t rank = sizes.size();
  auto host = std::make_unique<HostTensor>();
  host->storage = std::move(storage);
  host->dtype = dtype;
  host->device_type = device_type;
  host->device_index = device_index;
  for (size_t d = 0; d < rank; ++d) {
    if (sizes[d] < 0 || sizes[d] > INT32_MAX || strides[d] < INT32_MIN || strides[d] > INT32_MAX) {
      throw std::invalid_argument(std::string(function) + ": size " + std::to_string(sizes[d]) + " / stride " +
                                  std::to_string(strides[d]) + " of dimension " + std::to_string(d) +
                                  " does not fit an ExecuTorch tensor (32-bit sizes and strides)");
    }
    host->sizes32.push_back(static_cast<int32_t>(sizes[d]));
    host->strides32.push_back(static_cast<int32_t>(strides[d]));
  }
  // ExecuTorch describes a layout by its dimension order too: outermost (largest stride) first.
  host->dim_order.resize(rank);
  std::iota(host->dim_order.begin(), host->dim_order.end(), 0);
  std::stable_sort(host->dim_order.begin(), host->dim_order.end(),
                   [&](uint8_t a, uint8_t b) { return strides[a] > strides[b]; });
  host->sizes = std::move(sizes);
  host->strides = std::move(strides);
  host->impl = std::make_unique<TensorImpl>(static_cast<ScalarType>(dtype), static_cast<ssize_t>(rank),
                                            host->sizes32.data(), data, host->dim_order.data(),
                                            host->strides32.data());
  host->tensor = std::make_unique<Tensor>(host->impl.get());
  Tensor* handle = host->tensor.get();
  shimkit::metal_runtime::data_pointer_made(data, spanned_bytes(*host));
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().emplace(handle, std::move(host));
  return handle;
}

std::vector<int64_t> read_dims(int64_t ndim, const int64_t* values, const char* what, const char* function) {
  if (ndim < 0) throw std::invalid_argument(std::string(function) + ": negative rank " + std::to_string(ndim));
  if (ndim > 0 && values == nullptr) throw std::invalid_argument(std::string(function) + ": null " + what);
  return std::vector<int64_t>(values, values + ndim);
}

// What memory upstream leaves unwritten holds here: NaN in every float dtype, -1 in every integer one.
constexpr unsigned char kUnwrittenByte = 0xFF;

int64_t count_elements(const std::vector<int64_t>& sizes) {
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  return count;
}

Tensor* allocate(std::vector<int64_t> sizes, std::vector<int64_t> strides, int32_t dtype, int32_t device_type,
                 int32_t device_index, const char* function) {
  const size_t bytes = static_cast<size_t>(extent(sizes, strides)) * element_size(dtype);
  auto storage = std::make_shared<Storage>();
  storage->data = std::malloc(std::max<size_t>(bytes, 1));
  if (storage->data == nullptr) throw std::bad_alloc();
  std::memset(storage->data, kUnwrittenByte, bytes);
  storage->owned = true;
  void* data = storage->data;
  return make_tensor(std::move(storage), data, std::move(sizes), std::move(strides), dtype, device_type,
                     device_index, function);
}

// One element converted through double (floating point) or int64 (integers, exact), as ATen's copy_
// converts between dtypes.
double load_double(const char* at, int32_t dtype);
void store_double(char* at, int32_t dtype, double value);

float half_to_float(uint16_t bits) {
  _Float16 value;
  std::memcpy(&value, &bits, sizeof(value));
  return static_cast<float>(value);
}

uint16_t float_to_half(float value) {
  _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

float bfloat_to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t float_to_bfloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                    // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

bool is_integral(int32_t dtype) { return dtype <= kInt64 || dtype == kBool; }

int64_t load_int(const char* at, int32_t dtype) {
  switch (dtype) {
    case kUInt8: return *reinterpret_cast<const uint8_t*>(at);
    case kInt8: return *reinterpret_cast<const int8_t*>(at);
    case kInt16: return *reinterpret_cast<const int16_t*>(at);
    case kInt32: return *reinterpret_cast<const int32_t*>(at);
    case kInt64: return *reinterpret_cast<const int64_t*>(at);
    case kBool: return *reinterpret_cast<const uint8_t*>(at) != 0;
    default: return static_cast<int64_t>(load_double(at, dtype));
  }
}

void store_int(char* at, int32_t dtype, int64_t value) {
  switch (dtype) {
    case kUInt8: *reinterpret_cast<uint8_t*>(at) = static_cast<uint8_t>(value); return;
    case kInt8: *reinterpret_cast<int8_t*>(at) = static_cast<int8_t>(value); return;
    case kInt16: *reinterpret_cast<int16_t*>(at) = static_cast<int16_t>(value); return;
    case kInt32: *reinterpret_cast<int32_t*>(at) = static_cast<int32_t>(value); return;
    case kInt64: *reinterpret_cast<int64_t*>(at) = value; return;
    case kBool: *reinterpret_cast<uint8_t*>(at) = value != 0; return;
    default: store_double(at, dtype, static_cast<double>(value));
  }
}

double load_double(const char* at, int32_t dtype) {
  uint16_t bits;
  switch (dtype) {
    case kFloat16: std::memcpy(&bits, at, 2); return half_to_float(bits);
    case kFloat32: return *reinterpret_cast<const float*>(at);
    case kFloat64: return *reinterpret_cast<const double*>(at);
    case kBFloat16: std::memcpy(&bits, at, 2); return bfloat_to_float(bits);
    default: return static_cast<double>(load_int(at, dtype));
  }
}

void store_double(char* at, int32_t dtype, double value) {
  uint16_t bits;
  switch (dtype) {
    case kFloat16: bits = float_to_half(static_cast<float>(value)); std::memcpy(at, &bits, 2); return;
    case kFloat32: *reinterpret_cast<float*>(at) = static_cast<float>(value); return;
    case kFloat64: *reinterpret_cast<double*>(at) = value; return;
    case kBFloat16: bits = float_to_bfloat(static_cast<float>(value)); std::memcpy(at, &bits, 2); return;
    case kBool: *reinterpret_cast<uint8_t*>(at) = value != 0.0; return;
    default: store_int(at, dtype, static_cast<int64_t>(value));
  }
}

// dst[i] = src[i] over both layouts (same shape), converting dtypes as ATen does.
void copy_elements(const HostTensor& dst, const HostTensor& src, const char* function) {
  if (dst.sizes != src.sizes) {
    auto shape = [](const std::vector<int64_t>& s) {
      std::string text = "(";
      for (size_t i = 0; i < s.size(); ++i) text += (i ? ", " : "") + std::to_string(s[i]);
      return text + ")";
    };
    throw std::invalid_argument(std::string(function) + ": shapes differ, self " + shape(dst.sizes) + " and src " +
                                shape(src.sizes));
  }
  const size_t rank = dst.sizes.size();
  int64_t count = 1;
  for (int64_t size : dst.sizes) count *= size;
  if (count == 0) return;
  char* out = static_cast<char*>(dst.tensor->mutable_data_ptr());
  const char* in = static_cast<const char*>(src.tensor->const_data_ptr());
  const size_t out_size = element_size(dst.dtype), in_size = element_size(src.dtype);
  const bool same = dst.dtype == src.dtype;
  const bool integral = is_integral(dst.dtype) && is_integral(src.dtype);
  std::vector<int64_t> index(rank, 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t out_offset = 0, in_offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      out_offset += index[d] * dst.strides[d];
      in_offset += index[d] * src.strides[d];
    }
    char* to = out + out_offset * static_cast<int64_t>(out_size);
    const char* from = in + in_offset * static_cast<int64_t>(in_size);
    if (same) {
      std::memmove(to, from, out_size);
    } else if (integral) {
      store_int(to, dst.dtype, load_int(from, src.dtype));
    } else {
      store_double(to, dst.dtype, load_double(from, src.dtype));
    }
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < dst.sizes[d]) break;
      index[d] = 0;
    }
  }
}

std::string text_of(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

thread_local bool grad_mode = false;

}  // namespace

namespace executorch {
namespace backends {
namespace aoti {

extern "C" {

AOTITorchError aoti_torch_get_data_ptr(Tensor* tensor, void** ret_data_ptr) {
  return guarded(__func__, [&] { *ret_data_ptr = find(tensor, __func__).tensor->mutable_data_ptr(); });
}

AOTITorchError aoti_torch_get_storage_offset(Tensor* tensor, int64_t* ret_storage_offset) {
  return guarded(__func__, [&] {
    find(tensor, __func__);
    *ret_storage_offset = 0;  // folded into the data pointer
  });
}

AOTITorchError aoti_torch_get_strides(Tensor* tensor, int64_t** ret_strides) {
  return guarded(__func__, [&] { *ret_strides = find(tensor, __func__).strides.data(); });
}

AOTITorchError aoti_torch_get_dtype(Tensor* tensor, int32_t* ret_dtype) {
  return guarded(__func__, [&] { *ret_dtype = find(tensor, __func__).dtype; });
}

AOTITorchError aoti_torch_get_sizes(Tensor* tensor, int64_t** ret_sizes) {
  return guarded(__func__, [&] { *ret_sizes = find(tensor, __func__).sizes.data(); });
}

AOTITorchError aoti_torch_get_storage_size(Tensor* tensor, int64_t* ret_size) {
  return guarded(__func__, [&] {
    const HostTensor& host = find(tensor, __func__);
    *ret_size = extent(host.sizes, host.strides) * static_cast<int64_t>(element_size(host.dtype));
  });
}

AOTITorchError aoti_torch_get_device_index(Tensor* tensor, int32_t* ret_device_index) {
  return guarded(__func__, [&] { *ret_device_index = find(tensor, __func__).device_index; });
}

AOTITorchError aoti_torch_get_dim(Tensor* tensor, int64_t* ret_dim) {
  return guarded(__func__, [&] { *ret_dim = static_cast<int64_t>(find(tensor, __func__).sizes.size()); });
}

AOTITorchError aoti_torch_get_numel(Tensor* tensor, int64_t* ret_numel) {
  return guarded(__func__, [&] { *ret_numel = find(tensor, __func__).tensor->numel(); });
}

int32_t aoti_torch_device_type_cpu() { return kCpu; }
int32_t aoti_torch_layout_strided() { return 0; }
int32_t aoti_torch_dtype_float32() { return 6; }
int32_t aoti_torch_dtype_bfloat16() { return 15; }
int32_t aoti_torch_dtype_float16() { return 5; }
int32_t aoti_torch_dtype_bool() { return 11; }
int32_t aoti_torch_dtype_int8() { return 1; }
int32_t aoti_torch_dtype_uint8() { return 0; }
int32_t aoti_torch_dtype_int16() { return 2; }
int32_t aoti_torch_dtype_int32() { return 3; }
int32_t aoti_torch_dtype_int64() { return 4; }
size_t aoti_torch_dtype_element_size(int32_t dtype) { return element_size(dtype); }

int32_t aoti_torch_grad_mode_is_enabled() { return grad_mode; }
void aoti_torch_grad_mode_set_enabled(bool enabled) { grad_mode = enabled; }

void aoti_torch_warn(const char* func, const char* file, uint32_t line, const char* msg) {
  std::fprintf(stderr, "[shimkit metal runtime] warning in %s (%s:%u): %s\n", func, file, line, msg);
}

AOTITorchError aoti_torch_clone_preserve_strides(Tensor* self, Tensor** ret_new_tensor) {
  return guarded(__func__, [&] {
    const HostTensor& source = find(self, __func__);
    Tensor* copy = allocate(source.sizes, source.strides, source.dtype, source.device_type, source.device_index,
                            __func__);
    copy_elements(find(copy, __func__), source, __func__);
    *ret_new_tensor = copy;
  });
}

AOTITorchError aoti_torch_clone(Tensor* self, Tensor** ret_new_tensor) {
  return guarded(__func__, [&] {
    const HostTensor& source = find(self, __func__);
    Tensor* copy = allocate(source.sizes, contiguous_strides(source.sizes), source.dtype, source.device_type,
                            source.device_index, __func__);
    copy_elements(find(copy, __func__), source, __func__);
    *ret_new_tensor = copy;
  });
}

AOTITorchError aoti_torch_create_tensor_from_blob(void* data_ptr, int64_t ndim, const int64_t* sizes,
                                                  const int64_t* strides, int64_t storage_offset, int32_t dtype,
                                                  int32_t device_type, int32_t device_index,
                                                  Tensor** ret_new_tensor) {
  return guarded(__func__, [&] {
    char* data = static_cast<char*>(data_ptr) + storage_offset * static_cast<int64_t>(element_size(dtype));
    *ret_new_tensor = make_tensor(nullptr, data, read_dims(ndim, sizes, "sizes", __func__),
                                  read_dims(ndim, strides, "strides", __func__), dtype, device_type, device_index,
                                  __func__);
  });
}

}  // extern "C"

}  // namespace aoti

namespace metal {

extern "C" {

AOTITorchError aoti_torch_create_tensor_from_blob_v2(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                     const int64_t* strides_ptr, int64_t storage_offset,
                                                     int32_t dtype, int32_t device_type, int32_t device_index,
                                                     AOTITensorHandle* ret_new_tensor, int32_t layout,
                                                     const uint8_t* /*opaque_metadata*/,
                                                     int64_t opaque_metadata_size) {
  if (layout != 0 || opaque_metadata_size != 0) {
    return guarded(__func__, [&] {
      throw std::invalid_argument("only strided tensors without opaque metadata exist here (layout " +
                                  std::to_string(layout) + ")");
    });
  }
  const AOTITorchError refused = guarded(__func__, [&] { validate_dtype(dtype); });
  if (refused != Error::Ok) return refused;
  return aoti::aoti_torch_create_tensor_from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype,
                                                  device_type, device_index, ret_new_tensor);
}

AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AOTITensorHandle* ret_new_tensor) {
  return guarded(__func__, [&] {
    validate_dtype(dtype);
    auto sizes = read_dims(ndim, sizes_ptr, "sizes", __func__);
    auto strides = strides_ptr == nullptr ? contiguous_strides(sizes) : read_dims(ndim, strides_ptr, "strides", __func__);
    const int64_t numel = count_elements(sizes);
    if (numel == 0 && device_type == kMps) {
      throw std::runtime_error("Failed to allocate 0 bytes on Metal device (et_metal.mm's metal_allocate_buffer "
                               "refuses a buffer of no bytes)");
    }
    if (extent(sizes, strides) > numel) {
      throw std::invalid_argument("strides " + text_of(strides) + " of sizes " + text_of(sizes) + " span " +
                                  std::to_string(extent(sizes, strides)) + " elements, but memory.cpp allocates numel = " +
                                  std::to_string(numel) + " of them: the tensor would be written past its end");
    }
    *ret_new_tensor = allocate(std::move(sizes), std::move(strides), dtype, device_type, device_index, __func__);
  });
}

AOTITorchError aoti_torch_delete_tensor_object(AOTITensorHandle tensor) {
  return guarded(__func__, [&] {
    // On a Mac the command buffer keeps the buffers of the work encoded on it alive; here that work runs before
    // any memory it may read is freed.
    shimkit::metal_runtime::run_encoded_work();
    std::unique_ptr<HostTensor> doomed;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      auto it = registry().find(tensor);
      if (tensor == nullptr || it == registry().end()) {
        throw std::invalid_argument("not a live tensor handle of this runtime (deleted already?)");
      }
      doomed = std::move(it->second);
      registry().erase(it);
    }
    shimkit::metal_runtime::data_pointer_released(doomed->impl->mutable_data(), spanned_bytes(*doomed));
  });
}

AOTITorchError aoti_torch_copy_(AOTITensorHandle self, AOTITensorHandle src, int32_t /*non_blocking*/) {
  return guarded(__func__, [&] {
    shimkit::metal_runtime::run_encoded_work();
    const HostTensor& to = find(self, __func__);
    const HostTensor& from = find(src, __func__);
    validate_dtype(to.dtype);
    validate_dtype(from.dtype);
    if (to.dtype != from.dtype) {
      throw std::invalid_argument("dtype mismatch. self.dtype=" + std::to_string(to.dtype) + ", src.dtype=" +
                                  std::to_string(from.dtype) + ". aoti_torch_copy_ requires same dtypes");
    }
    const int64_t numel = count_elements(to.sizes);
    if (numel != count_elements(from.sizes)) {
      throw std::invalid_argument("numel mismatch. self.numel()=" + std::to_string(numel) +
                                  ", src.numel()=" + std::to_string(count_elements(from.sizes)));
    }
    if (to.strides != from.strides) {
      throw std::runtime_error("Layout conversion not supported (memory.cpp copies only between equal strides: self " +
                               text_of(to.strides) + ", src " + text_of(from.strides) + ")");
    }
    if (numel == 0) throw std::runtime_error("metal_copy_memory failed with status -1 (an empty copy, et_metal.mm)");
    const int64_t span = extent(to.sizes, to.strides);
    if (span < numel) {
      throw std::invalid_argument("strides " + text_of(to.strides) + " overlap: memory.cpp's copy of numel = " +
                                  std::to_string(numel) + " elements would run past the " + std::to_string(span) +
                                  " they span");
    }
    if (span > numel) {
      shimkit_runtime_record_divergence(
          "aoti_torch_copy_",
          "copies numel elements' bytes from src's data pointer (memory.cpp:325-356), so a layout with holes copies "
          "the holes and misses its end",
          ("sizes " + text_of(to.sizes) + " strides " + text_of(to.strides)).c_str());
    }
    std::memmove(to.tensor->mutable_data_ptr(), from.tensor->const_data_ptr(),
                 static_cast<size_t>(numel) * element_size(to.dtype));
  });
}

AOTITorchError aoti_torch__reinterpret_tensor(AOTITensorHandle self, int64_t ndim, const int64_t* sizes_ptr,
                                              const int64_t* strides_ptr, int64_t storage_offset,
                                              AOTITensorHandle* ret_new_tensor) {
  return guarded(__func__, [&] {
    const HostTensor& base = find(self, __func__);
    validate_dtype(base.dtype);
    char* data = static_cast<char*>(base.tensor->mutable_data_ptr()) +
                 storage_offset * static_cast<int64_t>(element_size(base.dtype));
    auto sizes = read_dims(ndim, sizes_ptr, "sizes", __func__);
    auto strides = read_dims(ndim, strides_ptr, "strides", __func__);
    // Upstream copies every view that is not packed (is_packed_strides, memory.cpp:372-395), broadcast ones too; a
    // broadcast view's copy holds what the view reads, at indices its strides reach, so only holes change a result.
    const int64_t numel = count_elements(sizes);
    if (numel > 1 && extent(sizes, strides) > numel) {
      shimkit_runtime_record_divergence(
          "aoti_torch__reinterpret_tensor",
          "copies a view with holes into a new contiguous buffer at the call (memory.cpp:372-447, :530-561): a write "
          "through it never reaches its base, a later write to the base never reaches it, and a kernel indexes the "
          "copy with the view's strides, past its end",
          ("sizes " + text_of(sizes) + " strides " + text_of(strides)).c_str());
    }
    *ret_new_tensor = make_tensor(base.storage, data, std::move(sizes), std::move(strides), base.dtype,
                                  base.device_type, base.device_index, __func__);
  });
}

AOTITorchError aoti_torch_new_tensor_handle(Tensor* orig_handle, Tensor** new_handle) {
  return guarded(__func__, [&] {
    const HostTensor& base = find(orig_handle, __func__);
    validate_dtype(base.dtype);
    *new_handle = make_tensor(base.storage, base.tensor->mutable_data_ptr(), base.sizes, base.strides, base.dtype,
                              base.device_type, base.device_index, __func__);
  });
}

void cleanup_memory() {}

int32_t aoti_torch_device_type_mps() { return kMps; }

AOTITorchError aoti_torch_get_device_type(AOTITensorHandle tensor, int32_t* ret_device_type) {
  return guarded(__func__, [&] { *ret_device_type = find(tensor, __func__).device_type; });
}

}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch

// Functions of torch's AOTI C API (aoti_torch/c/shim.h) that generated wrappers call and ExecuTorch's
// headers do not declare.
extern "C" {

using executorch::backends::aoti::AOTITorchError;

int32_t aoti_torch_device_type_cuda() { return kCuda; }
int32_t aoti_torch_dtype_float64() { return 7; }
int32_t aoti_torch_dtype_complex64() { return 9; }
int32_t aoti_torch_dtype_complex128() { return 10; }

AOTITorchError aoti_torch_assign_tensors_out(Tensor* src, Tensor** ret_dst) {
  return executorch::backends::metal::aoti_torch_new_tensor_handle(src, ret_dst);
}

AOTITorchError aoti_torch_as_strided(Tensor* self, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                     int64_t storage_offset, Tensor** ret) {
  return guarded(__func__, [&] {
    const HostTensor& base = find(self, __func__);
    const int64_t rank = static_cast<int64_t>(base.sizes.size());
    *ret = make_tensor(base.storage,
                       static_cast<char*>(base.tensor->mutable_data_ptr()) +
                           storage_offset * static_cast<int64_t>(element_size(base.dtype)),
                       read_dims(rank, sizes_ptr, "sizes", __func__), read_dims(rank, strides_ptr, "strides", __func__),
                       base.dtype, base.device_type, base.device_index, __func__);
  });
}

// 0-d tensors made from scalars (scalar_to_tensor.h) and scalars read back (item), on the CPU.
#define SHIMKIT_SCALAR_FUNCTIONS(NAME, CTYPE, DTYPE)                                                       \
  AOTITorchError aoti_torch_scalar_to_tensor_##NAME(CTYPE value, Tensor** ret) {                            \
    return guarded(__func__, [&] {                                                                          \
      Tensor* tensor = allocate({}, {}, DTYPE, kCpu, 0, __func__);                                          \
      char* at = static_cast<char*>(tensor->mutable_data_ptr());                                            \
      if (is_integral(DTYPE)) store_int(at, DTYPE, static_cast<int64_t>(value));                            \
      else store_double(at, DTYPE, static_cast<double>(value));                                             \
      *ret = tensor;                                                                                        \
    });                                                                                                     \
  }                                                                                                         \
  AOTITorchError aoti_torch_item_##NAME(Tensor* tensor, CTYPE* ret_value) {                                 \
    return guarded(__func__, [&] {                                                                          \
      const HostTensor& host = find(tensor, __func__);                                                      \
      if (host.tensor->numel() != 1) throw std::invalid_argument("item of a tensor with " +                \
                                                                 std::to_string(host.tensor->numel()) +    \
                                                                 " elements");                              \
      const char* at = static_cast<const char*>(host.tensor->const_data_ptr());                             \
      *ret_value = is_integral(DTYPE) ? static_cast<CTYPE>(load_int(at, host.dtype))                        \
                                      : static_cast<CTYPE>(load_double(at, host.dtype));                    \
    });                                                                                                     \
  }

SHIMKIT_SCALAR_FUNCTIONS(float32, float, 6)
SHIMKIT_SCALAR_FUNCTIONS(float64, double, 7)
SHIMKIT_SCALAR_FUNCTIONS(uint8, uint8_t, 0)
SHIMKIT_SCALAR_FUNCTIONS(int8, int8_t, 1)
SHIMKIT_SCALAR_FUNCTIONS(int16, int16_t, 2)
SHIMKIT_SCALAR_FUNCTIONS(int32, int32_t, 3)
SHIMKIT_SCALAR_FUNCTIONS(int64, int64_t, 4)
SHIMKIT_SCALAR_FUNCTIONS(bool, bool, 11)
#undef SHIMKIT_SCALAR_FUNCTIONS

// How many tensor handles are alive: a program that has returned its outputs and had them deleted
// leaves none.
int64_t shimkit_runtime_live_tensors() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return static_cast<int64_t>(registry().size());
}

}  // extern "C"
