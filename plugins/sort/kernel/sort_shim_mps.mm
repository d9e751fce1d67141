// aoti_torch_mps_sort_stable for ExecuTorch's Metal runtime: allocates values and indices like self and
// dispatches sort.metal's sort_stable_<dtype> with one thread per element, exactly as the plugin's
// launch_sort does on Linux through shimkit.metal (where this kernel is tested).
//
// NOT COMPILED OR RUN ON LINUX, and not built or run by shimkit's CI (no Mac was available): it is
// written against executorch/backends/apple/metal/runtime (v1.5.1)'s ETMetalShaderLibrary and
// aoti_torch_empty_strided, the pattern of the runtime's own shims. The MSL source is the string the
// registry-generated adapter file defines (shimkit config mps --msl-adapter FILE).
#if __has_include(<executorch/backends/apple/metal/runtime/shims/et_metal.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>

#include <memory>
#include <string>
#include <vector>

extern "C" const char shimkit_msl_source_sort[];

namespace {

namespace aoti_api = executorch::backends::aoti;
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

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_sort_stable(AOTITensorHandle self, int32_t* /*stable: always*/,
                                                     int64_t dim, int32_t descending,
                                                     AOTITensorHandle* ret0, AOTITensorHandle* ret1) {
  if (self == nullptr || ret0 == nullptr || ret1 == nullptr) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: null tensor handle");
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(self);
  const int64_t rank = input->dim();
  const int64_t wrapped = dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
  if (wrapped < 0 || wrapped >= (rank == 0 ? 1 : rank)) {
    ET_LOG(Error, "aoti_torch_mps_sort_stable: dim %lld out of range for a %lld-d tensor",
           static_cast<long long>(dim), static_cast<long long>(rank));
    return Error::InvalidArgument;
  }
  const char* type = msl_type(static_cast<int32_t>(input->scalar_type()));
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
  int32_t device_type = 0;
  aoti_api::aoti_torch_get_device_type(self, &device_type);
  if (aoti_torch_empty_strided(rank, sizes.data(), strides.data(), static_cast<int32_t>(input->scalar_type()),
                               device_type, 0, &values) != Error::Ok ||
      aoti_torch_empty_strided(rank, sizes.data(), strides.data(), /*int64*/ 4, device_type, 0, &indices) !=
          Error::Ok) {
    if (values != nullptr) aoti_torch_delete_tensor_object(values);
    ET_LOG(Error, "aoti_torch_mps_sort_stable: could not allocate the results");
    return Error::MemoryAllocationFailed;
  }
  if (input->numel() > 0) {
    static std::unique_ptr<aoti_api::ETMetalShaderLibrary> library(
        new aoti_api::ETMetalShaderLibrary(std::string(shimkit_msl_source_sort)));
    auto kernel = library->getKernelFunction(std::string("sort_stable_") + type);
    if (!kernel) {
      aoti_torch_delete_tensor_object(values);
      aoti_torch_delete_tensor_object(indices);
      ET_LOG(Error, "aoti_torch_mps_sort_stable: the MSL library has no sort_stable_%s", type);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(values));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(indices));
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

#endif
