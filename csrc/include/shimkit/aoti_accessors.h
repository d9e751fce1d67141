// The Api policy of shimkit/aoti_adapter.h over torch's AOTI C accessor API (aoti_torch/c/shim.h): for
// adapters compiled against that header's declarations, which libtorch (at::Tensor*) and shimkit's Linux
// stand-in of the Metal runtime (ExecuTorch tensors, runtime/native) both implement. A file that
// includes this needs torch's headers on its include path; the rest of the SDK does not.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdint>

#include "shimkit/tensor_view.h"

namespace shimkit {
namespace aoti {

struct AccessorApi {
  using Handle = AtenTensorHandle;
  static int32_t get_data_ptr(Handle h, void** out) { return aoti_torch_get_data_ptr(h, out); }
  static int32_t get_dim(Handle h, int64_t* out) { return aoti_torch_get_dim(h, out); }
  static int32_t get_sizes(Handle h, int64_t** out) { return aoti_torch_get_sizes(h, out); }
  static int32_t get_strides(Handle h, int64_t** out) { return aoti_torch_get_strides(h, out); }
  static int32_t get_dtype(Handle h, int32_t* out) { return aoti_torch_get_dtype(h, out); }
  static int32_t get_storage_offset(Handle h, int64_t* out) { return aoti_torch_get_storage_offset(h, out); }
  static int32_t get_device(Handle h, Device* out) {
    int32_t type = 0, index = 0;
    if (aoti_torch_get_device_type(h, &type) != AOTI_TORCH_SUCCESS ||
        aoti_torch_get_device_index(h, &index) != AOTI_TORCH_SUCCESS) {
      return AOTI_TORCH_FAILURE;
    }
    out->type = static_cast<DeviceType>(type);
    out->index = index;
    return AOTI_TORCH_SUCCESS;
  }
};

}  // namespace aoti
}  // namespace shimkit
