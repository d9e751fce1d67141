// The one c-shim adapter behind every plugin MSL kernel (Kernel(msl=MslKernel(...))), for ExecuTorch's
// Metal runtime. NOT COMPILED OR RUN ON LINUX, and not built or run by shimkit's CI (no Mac was
// available): it is written against executorch/backends/apple/metal/runtime (v1.5.1)'s
// ETMetalShaderLibrary / ETMetalKernelFunction, the dispatch pattern of its own shims. On Linux the
// same MSL runs through shimkit.metal with the same binding (shimkit.testing.kernels.msl_kernel).
//
// shimkit config mps --msl-adapter FILE generates the per-shim entry points that call
// shimkit_msl_elementwise(source, function, tensors, count): tensors[0] is out, the rest the op's tensor
// arguments. Each must be contiguous with out's shape and dtype; the kernel named
// <function>_<MSL dtype> runs one thread per element of out.
#if __has_include(<executorch/backends/apple/metal/runtime/shims/et_metal.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "shimkit/dtype.h"

namespace {

namespace aoti_api = executorch::backends::aoti;
using executorch::runtime::Error;

// One compiled library per MSL source, created on first use and kept for the process.
aoti_api::ETMetalShaderLibrary& library_for(const char* source) {
  static std::mutex mutex;
  static std::unordered_map<const char*, std::unique_ptr<aoti_api::ETMetalShaderLibrary>> libraries;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = libraries[source];
  if (!slot) slot.reset(new aoti_api::ETMetalShaderLibrary(std::string(source)));
  return *slot;
}

const char* msl_type(int32_t scalar_type) {
  switch (scalar_type) {
    case 6: return "float";
    case 5: return "half";
    case 15: return "bfloat";
    case 3: return "int";
    case 4: return "long";
    case 2: return "short";
    case 1: return "char";
    case 0: return "uchar";
    case 11: return "bool";
    default: return nullptr;
  }
}

}  // namespace

extern "C" AOTITorchError shimkit_msl_elementwise(const char* source, const char* function,
                                                  AOTITensorHandle* tensors, int count) {
  auto* out = reinterpret_cast<executorch::runtime::etensor::Tensor*>(tensors[0]);
  int32_t dtype = 0;
  if (aoti_api::aoti_torch_get_dtype(tensors[0], &dtype) != Error::Ok || msl_type(dtype) == nullptr) {
    ET_LOG(Error, "%s: out has a dtype the MSL kernel has no variant for", function);
    return Error::InvalidArgument;
  }
  for (int i = 1; i < count; ++i) {
    auto* t = reinterpret_cast<executorch::runtime::etensor::Tensor*>(tensors[i]);
    if (t->scalar_type() != out->scalar_type() || t->sizes() != out->sizes() || t->numel() != out->numel()) {
      ET_LOG(Error, "%s: argument %d must have out's shape and dtype", function, i);
      return Error::InvalidArgument;
    }
  }
  if (out->numel() == 0) return Error::Ok;
  auto kernel = library_for(source).getKernelFunction(std::string(function) + "_" + msl_type(dtype));
  if (!kernel) {
    ET_LOG(Error, "%s: the MSL library has no %s variant", function, msl_type(dtype));
    return Error::NotSupported;
  }
  kernel->runCommandBlock([&] {
    kernel->startEncoding();
    for (int i = 0; i < count; ++i) {
      kernel->setArg(i, *reinterpret_cast<executorch::runtime::etensor::Tensor*>(tensors[i]));
    }
    kernel->dispatchSingle(static_cast<uint64_t>(out->numel()));
  });
  return Error::Ok;
}

#endif
