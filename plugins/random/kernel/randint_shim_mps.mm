// aoti_torch_mps_randint_low_out for ExecuTorch's Metal runtime: fills `out` (contiguous int64, `size`'s
// shape) with randint.metal's randint_low_out_long, one thread per element, from a fresh 64-bit seed per
// call: exactly what the plugin's launch_randint_low_out does on Linux through shimkit.metal (where the
// kernel's values are tested for their distribution).
//
// The seeds come from one process-wide std::mt19937_64, seeded once from std::random_device: like an
// unseeded generator, every run draws differently (the runtime has no manual_seed to honour).
//
// Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py). The MSL source is the string the registry-generated adapter file
// defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "shimkit/metal_adapter.h"

extern "C" const char shimkit_msl_source_randint[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, ETMetalShaderLibrary.
namespace executorch {
namespace backends {
namespace metal {
namespace {

int64_t next_seed() {
  static std::mutex mutex;
  static std::mt19937_64 engine{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int64_t>(engine());
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_randint_low_out(AOTITensorHandle out, int64_t low, int64_t high,
                                                         const int64_t* size, int64_t size_len_) {
  if (out == nullptr || (size == nullptr && size_len_ > 0)) {
    ET_LOG(Error, "aoti_torch_mps_randint_low_out: null argument");
    return Error::InvalidArgument;
  }
  if (low >= high) {
    ET_LOG(Error, "aoti_torch_mps_randint_low_out: random_ expects 'from' to be less than 'to', but got from=%lld "
           ">= to=%lld", static_cast<long long>(low), static_cast<long long>(high));
    return Error::InvalidArgument;
  }
  Tensor* result = out;
  if (static_cast<int32_t>(result->scalar_type()) != shimkit::scalar_types::kInt64) {
    ET_LOG(Error, "aoti_torch_mps_randint_low_out: out must be int64 (Inductor's seeds), got dtype %d",
           static_cast<int>(result->scalar_type()));
    return Error::NotSupported;
  }
  int64_t numel = 1;
  bool same_shape = result->dim() == size_len_;
  for (int64_t d = 0; d < size_len_; ++d) {
    numel *= size[d];
    same_shape = same_shape && result->size(d) == size[d];
  }
  if (!same_shape) {
    ET_LOG(Error, "aoti_torch_mps_randint_low_out: out's shape differs from size (resizing out is not supported)");
    return Error::NotSupported;
  }
  if (!shimkit_adapter::check_contiguous("aoti_torch_mps_randint_low_out", "out", *result)) return Error::NotSupported;
  if (numel == 0) {
    return Error::Ok;
  }
  static std::unique_ptr<ETMetalShaderLibrary> library(new ETMetalShaderLibrary(shimkit_msl_source_randint));
  auto kernel = library->getKernelFunction("randint_low_out_long");
  if (!kernel) {
    ET_LOG(Error, "aoti_torch_mps_randint_low_out: the MSL library has no randint_low_out_long");
    return Error::NotSupported;
  }
  const int64_t seed = next_seed();
  kernel->runCommandBlock([&] {
    kernel->startEncoding();
    kernel->setArg(0, *result);
    kernel->setArg(1, low);
    kernel->setArg(2, high);
    kernel->setArg(3, seed);
    kernel->dispatchSingle(static_cast<uint64_t>(numel));
  });
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch
