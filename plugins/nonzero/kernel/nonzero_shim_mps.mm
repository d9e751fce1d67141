// aoti_torch_mps_nonzero for ExecuTorch's Metal runtime: counts the nonzero elements with nonzero.metal's
// nonzero_<dtype> (write = 0), waits for that count as ATen's mps nonzero does, allocates [count, ndim]
// int64 and dispatches the same kernel again (write = 1) to write the coordinates: exactly what the plugin's
// launch_nonzero does on Linux through shimkit.metal (where this kernel is tested).
//
// NOT COMPILED OR RUN ON LINUX, and not built or run by shimkit's CI (no Mac was available): it is written
// against executorch/backends/apple/metal/runtime's ETMetalShaderLibrary, synchronize_metal_stream and
// aoti_torch_empty_strided, the pattern of the runtime's own shims and of plugins/sort. The MSL source is the
// string the registry-generated adapter file defines (shimkit config mps --msl-adapter FILE).
#if __has_include(<executorch/backends/apple/metal/runtime/shims/et_metal.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>

#include <memory>
#include <string>
#include <vector>

extern "C" const char shimkit_msl_source_nonzero[];

namespace {

namespace aoti_api = executorch::backends::aoti;
namespace metal_api = executorch::backends::metal;
using executorch::runtime::Error;
using ETensor = executorch::runtime::etensor::Tensor;

const char* msl_type(int32_t scalar_type) {
  switch (scalar_type) {
    case 6: return "float";
    case 5: return "half";
    case 15: return "bfloat";
    case 4: return "long";
    case 3: return "int";
    case 2: return "short";
    case 1: return "char";
    case 0: return "uchar";
    case 11: return "bool";
    default: return nullptr;
  }
}

bool is_contiguous(const ETensor& t) {
  int64_t expected = 1;
  for (int d = t.dim() - 1; d >= 0; --d) {
    if (t.size(d) != 1 && t.strides()[d] != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

Error empty_int64(AOTITensorHandle like, const std::vector<int64_t>& sizes, AOTITensorHandle* out) {
  std::vector<int64_t> strides(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  int32_t device_type = 0;
  aoti_api::aoti_torch_get_device_type(like, &device_type);
  return aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), /*int64*/ 4,
                                  device_type, 0, out);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_nonzero(AOTITensorHandle self, AOTITensorHandle* ret0) {
  if (self == nullptr || ret0 == nullptr) {
    ET_LOG(Error, "aoti_torch_mps_nonzero: null tensor handle");
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(self);
  const char* type = msl_type(static_cast<int32_t>(input->scalar_type()));
  if (type == nullptr) {
    ET_LOG(Error, "aoti_torch_mps_nonzero: dtype %d has no nonzero variant", static_cast<int>(input->scalar_type()));
    return Error::NotSupported;
  }
  if (!is_contiguous(*input)) {
    ET_LOG(Error, "aoti_torch_mps_nonzero: self must be contiguous");
    return Error::NotSupported;
  }
  const int64_t ndim = input->dim();
  const int64_t numel = input->numel();
  if (numel == 0) {
    return empty_int64(self, {0, ndim}, ret0) == Error::Ok ? Error::Ok : Error::MemoryAllocationFailed;
  }
  static std::unique_ptr<metal_api::ETMetalShaderLibrary> library(
      new metal_api::ETMetalShaderLibrary(std::string(shimkit_msl_source_nonzero)));
  auto kernel = library->getKernelFunction(std::string("nonzero_") + type);
  if (!kernel) {
    ET_LOG(Error, "aoti_torch_mps_nonzero: the MSL library has no nonzero_%s", type);
    return Error::NotSupported;
  }
  std::vector<int64_t> sizes(input->sizes().begin(), input->sizes().end());
  if (sizes.empty()) sizes.push_back(1);
  AOTITensorHandle total = nullptr;
  AOTITensorHandle sizes_tensor = nullptr;
  if (empty_int64(self, {1}, &total) != Error::Ok ||
      empty_int64(self, {static_cast<int64_t>(sizes.size())}, &sizes_tensor) != Error::Ok) {
    if (total != nullptr) aoti_torch_delete_tensor_object(total);
    ET_LOG(Error, "aoti_torch_mps_nonzero: could not allocate the count");
    return Error::MemoryAllocationFailed;
  }
  auto* total_tensor = reinterpret_cast<ETensor*>(total);
  auto* sizes_buffer = reinterpret_cast<ETensor*>(sizes_tensor);
  std::copy(sizes.begin(), sizes.end(), sizes_buffer->mutable_data_ptr<int64_t>());
  auto dispatch = [&](ETensor& coordinates, int64_t write) {
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, coordinates);
      kernel->setArg(1, *total_tensor);
      kernel->setArg(2, *input);
      kernel->setArg(3, *sizes_buffer);
      kernel->setArg(4, ndim);
      kernel->setArg(5, numel);
      kernel->setArg(6, write);
      kernel->dispatchSingle(static_cast<uint64_t>(numel));
    });
  };
  dispatch(*total_tensor, 0);
  metal_api::synchronize_metal_stream();
  const int64_t count = total_tensor->const_data_ptr<int64_t>()[0];
  AOTITensorHandle coordinates = nullptr;
  if (empty_int64(self, {count, ndim}, &coordinates) != Error::Ok) {
    aoti_torch_delete_tensor_object(total);
    aoti_torch_delete_tensor_object(sizes_tensor);
    ET_LOG(Error, "aoti_torch_mps_nonzero: could not allocate the result");
    return Error::MemoryAllocationFailed;
  }
  if (count > 0) {
    dispatch(*reinterpret_cast<ETensor*>(coordinates), 1);
    // The temporaries are freed below: the writing dispatch must be done with them first.
    metal_api::synchronize_metal_stream();
  }
  aoti_torch_delete_tensor_object(total);
  aoti_torch_delete_tensor_object(sizes_tensor);
  *ret0 = coordinates;
  return Error::Ok;
}

#endif
