// shimkit's declaration of ExecuTorch's Metal tensor attributes (backends/apple/metal/runtime/shims/
// tensor_attribute.h), from its public signatures, for the Linux stand-in of the Metal runtime.
#pragma once

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>

namespace executorch {
namespace backends {
namespace metal {

extern "C" {
int32_t aoti_torch_device_type_mps();
AOTITorchError aoti_torch_get_device_type(AOTITensorHandle tensor, int32_t* ret_device_type);
}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch
