// aoti_torch_mps_sort_stable for ExecuTorch's Metal runtime: allocates values and indices like self and
// dispatches sort.metal's sort_stable_<dtype> with one thread per element, exactly as the plugin's
// launch_sort does on Linux through shimkit.metal (where this kernel is tested).
//
// Compiled and run on Linux against the Metal runtime stand-in in csrc/metal_runtime
// (tests/test_metal_runtime_adapters.py). The MSL source is the string the registry-generated adapter file
// defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <memory>
#include <string>
#include <vector>

#include "shimkit/dense.h"
#include "shimkit/dtype.h"

extern "C" const char shimkit_msl_source_sort[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, aoti_torch_empty_strided.
namespace executorch {
namespace backends {
namespace metal {
namespace {

// c10::DeviceType::MPS: the runtime keeps every tensor in Metal buffers.
constexpr int32_t kMps = 13;

using shimkit::is_contiguous;

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_sort_stable(AOTITensorHandle self, int32_t* /*stable: always*/,
                                                     int64_t dim, int32_t descending,
                                                     AOTITensorHandle* ret0, AOTITensorHandle* ret1) {
  if (self == nullptr || ret0 == nullptr || ret1 == nullptr) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: null tensor handle");
    return Error::InvalidArgument;
  }
  Tensor* input = self;
  const int64_t rank = input->dim();
  const int64_t wrapped = dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
  if (wrapped < 0 || wrapped >= (rank == 0 ? 1 : rank)) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: dim %lld out of range for a %lld-d tensor",
           static_cast<long long>(dim), static_cast<long long>(rank));
    return Error::InvalidArgument;
  }
  const char* type = shimkit::msl_type_name(static_cast<int32_t>(input->scalar_type()));
  if (type == nullptr) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: dtype %d has no sort_stable variant",
           static_cast<int>(input->scalar_type()));
    return Error::NotSupported;
  }
  if (!is_contiguous(*input)) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: self must be contiguous");
    return Error::NotSupported;
  }
  const int64_t size = rank == 0 ? 1 : input->size(wrapped);
  int64_t inner = 1;
  for (int64_t d = wrapped + 1; d < rank; ++d) inner *= input->size(d);

  std::vector<int64_t> sizes(input->sizes().begin(), input->sizes().end());
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  AOTITensorHandle values = nullptr;
  AOTITensorHandle indices = nullptr;
  if (aoti_torch_empty_strided(rank, sizes.data(), strides.data(), static_cast<int32_t>(input->scalar_type()), kMps,
                               0, &values) != Error::Ok ||
      aoti_torch_empty_strided(rank, sizes.data(), strides.data(), /*int64*/ 4, kMps, 0, &indices) != Error::Ok) {
    if (values != nullptr) aoti_torch_delete_tensor_object(values);
    ET_LOG(Error, "aoti_torch_mps_sort_stable: could not allocate the results");
    return Error::MemoryAllocationFailed;
  }
  if (input->numel() > 0) {
    static std::unique_ptr<ETMetalShaderLibrary> library(new ETMetalShaderLibrary(shimkit_msl_source_sort));
    auto kernel = library->getKernelFunction(std::string("sort_stable_") + type);
    if (!kernel) {
      aoti_torch_delete_tensor_object(values);
      aoti_torch_delete_tensor_object(indices);
      ET_LOG(Error, "aoti_torch_mps_sort_stable: the MSL library has no sort_stable_%s", type);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *values);
      kernel->setArg(1, *indices);
      kernel->setArg(2, *input);
      kernel->setArg(3, size);
      kernel->setArg(4, inner);
      kernel->setArg(5, static_cast<int64_t>(descending != 0));
      kernel->dispatchSingle(static_cast<uint64_t>(input->numel()));
    });
  }
  *ret0 = values;
  *ret1 = indices;
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch
