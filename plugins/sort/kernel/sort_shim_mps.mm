// aoti_torch_mps_sort_stable for ExecuTorch's Metal runtime: allocates values and indices like self and
// dispatches sort.metal's sort_stable_<dtype> with one thread per element, exactly as the plugin's
// launch_sort does on Linux through shimkit.metal (where this kernel is tested).
//
// Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py). The MSL source is the string the registry-generated adapter file
// defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <memory>
#include <string>
#include <vector>

#include "shimkit/metal_adapter.h"

extern "C" const char shimkit_msl_source_sort[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, aoti_torch_empty_strided.
namespace executorch {
namespace backends {
namespace metal {
namespace {

constexpr const char* kShim = "aoti_torch_mps_sort_stable";

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_sort_stable(AOTITensorHandle self, int32_t* /*stable: always*/,
                                                     int64_t dim, int32_t descending,
                                                     AOTITensorHandle* ret0, AOTITensorHandle* ret1) {
  if (!shimkit_adapter::non_null(kShim, {self, ret0, ret1})) return Error::InvalidArgument;
  Tensor* input = self;
  const int64_t rank = input->dim();
  const int64_t wrapped = dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
  if (wrapped < 0 || wrapped >= (rank == 0 ? 1 : rank)) {
    ET_LOG(Error, "%s: dim %lld out of range for a %lld-d tensor", kShim, static_cast<long long>(dim),
           static_cast<long long>(rank));
    return Error::InvalidArgument;
  }
  const char* type = shimkit_adapter::msl_variant_type(kShim, "sort_stable", *input);
  if (type == nullptr) return Error::NotSupported;
  if (!shimkit_adapter::check_contiguous(kShim, "self", *input)) return Error::NotSupported;
  const int64_t size = rank == 0 ? 1 : input->size(wrapped);
  int64_t inner = 1;
  for (int64_t d = wrapped + 1; d < rank; ++d) inner *= input->size(d);

  const std::vector<int64_t> sizes(input->sizes().begin(), input->sizes().end());
  AOTITensorHandle values = nullptr;
  AOTITensorHandle indices = nullptr;
  if (shimkit_adapter::empty_contiguous(sizes, static_cast<int32_t>(input->scalar_type()), &values) != Error::Ok ||
      shimkit_adapter::empty_contiguous(sizes, shimkit::scalar_types::kInt64, &indices) != Error::Ok) {
    if (values != nullptr) aoti_torch_delete_tensor_object(values);
    ET_LOG(Error, "%s: could not allocate the results", kShim);
    return Error::MemoryAllocationFailed;
  }
  if (input->numel() > 0) {
    static std::unique_ptr<ETMetalShaderLibrary> library(new ETMetalShaderLibrary(shimkit_msl_source_sort));
    auto kernel = library->getKernelFunction(std::string("sort_stable_") + type);
    if (!kernel) {
      aoti_torch_delete_tensor_object(values);
      aoti_torch_delete_tensor_object(indices);
      ET_LOG(Error, "%s: the MSL library has no sort_stable_%s", kShim, type);
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
