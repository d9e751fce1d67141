// shimkit's declaration of ExecuTorch's Metal shim types (backends/apple/metal/runtime/shims/types.h),
// from its public API, for the Linux stand-in of the Metal runtime (runtime/native).
#pragma once

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstdint>

namespace executorch {
namespace backends {
namespace metal {

using executorch::runtime::Error;
using executorch::runtime::etensor::Tensor;

extern "C" {
using AOTITensorHandle = Tensor*;
using AOTIRuntimeError = Error;
using AOTITorchError = Error;
}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch
