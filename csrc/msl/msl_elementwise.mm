// The one c-shim adapter behind every plugin MSL kernel (Kernel(msl=MslKernel(...))), for ExecuTorch's
// Metal runtime, written against its ETMetalShaderLibrary / ETMetalKernelFunction, the dispatch pattern
// of its own shims. Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py); the same MSL also runs through shimkit.metal with the same
// binding (shimkit.testing.kernels.msl_kernel).
//
// shimkit config mps --msl-adapter FILE generates the per-shim entry points that call
// shimkit_msl_elementwise(source, function, tensors, count): tensors[0] is out, the rest the op's tensor
// arguments. Each must be contiguous with out's shape and dtype; the kernel named
// <function>_<MSL dtype> runs one thread per element of out.
//
// setup.py compiles every csrc/**/*.mm into shimkit._C on macOS, where no ExecuTorch headers need be
// installed: only the runtime build, which has them, gets the adapter.
#if __has_include(<executorch/backends/apple/metal/runtime/shims/et_metal.h>)

#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "shimkit/dense.h"
#include "shimkit/dtype.h"

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, ETMetalShaderLibrary.
namespace executorch {
namespace backends {
namespace metal {
namespace {

// One compiled library per MSL source, created on first use and kept for the process.
ETMetalShaderLibrary& library_for(const char* source) {
  static std::mutex mutex;
  static std::unordered_map<const char*, std::unique_ptr<ETMetalShaderLibrary>> libraries;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = libraries[source];
  if (!slot) slot.reset(new ETMetalShaderLibrary(source));
  return *slot;
}

using shimkit::is_contiguous;  // the kernels index every argument by out's element index

}  // namespace

extern "C" AOTITorchError shimkit_msl_elementwise(const char* source, const char* function,
                                                  AOTITensorHandle* tensors, int count) {
  for (int i = 0; i < count; ++i) {
    if (tensors[i] == nullptr) {
      ET_LOG(Error, "%s: tensor argument %d is null", function, i);
      return Error::InvalidArgument;
    }
  }
  const Tensor& out = *tensors[0];
  const char* type = shimkit::msl_type_name(static_cast<int32_t>(out.scalar_type()));
  if (type == nullptr) {
    ET_LOG(Error, "%s: out has a dtype the MSL kernel has no variant for", function);
    return Error::InvalidArgument;
  }
  for (int i = 0; i < count; ++i) {
    const Tensor& t = *tensors[i];
    if (t.scalar_type() != out.scalar_type() || t.sizes() != out.sizes() || !is_contiguous(t)) {
      ET_LOG(Error, "%s: argument %d must be contiguous with out's shape and dtype", function, i);
      return Error::InvalidArgument;
    }
  }
  if (out.numel() == 0) return Error::Ok;
  auto kernel = library_for(source).getKernelFunction(std::string(function) + "_" + type);
  if (!kernel) {
    ET_LOG(Error, "%s: the MSL library has no %s variant", function, type);
    return Error::NotSupported;
  }
  kernel->runCommandBlock([&] {
    kernel->startEncoding();
    for (int i = 0; i < count; ++i) {
      kernel->setArg(i, *tensors[i]);
    }
    kernel->dispatchSingle(static_cast<uint64_t>(out.numel()));
  });
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch

#endif
