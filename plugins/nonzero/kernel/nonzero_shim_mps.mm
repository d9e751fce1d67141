// aoti_torch_mps_nonzero for ExecuTorch's Metal runtime: counts the nonzero elements with nonzero.metal's
// nonzero_<dtype> (write = 0), waits for that count as ATen's mps nonzero does, allocates [count, ndim]
// int64 with strides (1, count) (ATen's layout, which Inductor's code after the call indexes) and dispatches the same kernel again (write = 1) to write the coordinates: exactly what the plugin's
// launch_nonzero does on Linux through shimkit.metal (where this kernel is tested).
//
// Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py). The MSL source is the string the registry-generated adapter file
// defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shimkit/metal_adapter.h"

extern "C" const char shimkit_msl_source_nonzero[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, aoti_torch_empty_strided.
namespace executorch {
namespace backends {
namespace metal {
namespace {

constexpr const char* kShim = "aoti_torch_mps_nonzero";

Error empty_int64(const std::vector<int64_t>& sizes, AOTITensorHandle* out) {
  return shimkit_adapter::empty_contiguous(sizes, shimkit::scalar_types::kInt64, out);
}

// [rows, ndim] int64 with strides (1, rows), as ATen's nonzero returns it on every device.
Error empty_coordinates(int64_t rows, int64_t ndim, AOTITensorHandle* out) {
  const int64_t sizes[2] = {rows, ndim};
  const int64_t strides[2] = {1, rows};
  return aoti_torch_empty_strided(2, sizes, strides, shimkit::scalar_types::kInt64, shimkit::device_types::kMps, 0,
                                  out);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_nonzero(AOTITensorHandle self, AOTITensorHandle* ret0) {
  if (!shimkit_adapter::non_null(kShim, {self, ret0})) return Error::InvalidArgument;
  Tensor* input = self;
  const char* type = shimkit_adapter::msl_variant_type(kShim, "nonzero", *input);
  if (type == nullptr) return Error::NotSupported;
  if (!shimkit_adapter::check_contiguous(kShim, "self", *input)) return Error::NotSupported;
  const int64_t ndim = input->dim();
  const int64_t numel = input->numel();
  if (numel == 0) {
    return empty_coordinates(0, ndim, ret0) == Error::Ok ? Error::Ok : Error::MemoryAllocationFailed;
  }
  static std::unique_ptr<ETMetalShaderLibrary> library(new ETMetalShaderLibrary(shimkit_msl_source_nonzero));
  auto kernel = library->getKernelFunction(std::string("nonzero_") + type);
  if (!kernel) {
    ET_LOG(Error, "%s: the MSL library has no nonzero_%s", kShim, type);
    return Error::NotSupported;
  }
  std::vector<int64_t> sizes(input->sizes().begin(), input->sizes().end());
  if (sizes.empty()) sizes.push_back(1);
  AOTITensorHandle total = nullptr;
  AOTITensorHandle sizes_tensor = nullptr;
  if (empty_int64({1}, &total) != Error::Ok ||
      empty_int64({static_cast<int64_t>(sizes.size())}, &sizes_tensor) != Error::Ok) {
    if (total != nullptr) aoti_torch_delete_tensor_object(total);
    ET_LOG(Error, "%s: could not allocate the count", kShim);
    return Error::MemoryAllocationFailed;
  }
  std::copy(sizes.begin(), sizes.end(), sizes_tensor->mutable_data_ptr<int64_t>());
  auto dispatch = [&](Tensor& coordinates, int64_t write) {
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, coordinates);
      kernel->setArg(1, *total);
      kernel->setArg(2, *input);
      kernel->setArg(3, *sizes_tensor);
      kernel->setArg(4, ndim);
      kernel->setArg(5, numel);
      kernel->setArg(6, write);
      kernel->dispatchSingle(static_cast<uint64_t>(numel));
    });
  };
  dispatch(*total, 0);
  synchronize_metal_stream();
  const int64_t count = total->const_data_ptr<int64_t>()[0];
  AOTITensorHandle coordinates = nullptr;
  if (empty_coordinates(count, ndim, &coordinates) != Error::Ok) {
    aoti_torch_delete_tensor_object(total);
    aoti_torch_delete_tensor_object(sizes_tensor);
    ET_LOG(Error, "%s: could not allocate the result", kShim);
    return Error::MemoryAllocationFailed;
  }
  if (count > 0) {
    dispatch(*coordinates, 1);
    // The temporaries are freed below: the writing dispatch must be done with them first.
    synchronize_metal_stream();
  }
  aoti_torch_delete_tensor_object(total);
  aoti_torch_delete_tensor_object(sizes_tensor);
  *ret0 = coordinates;
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch
