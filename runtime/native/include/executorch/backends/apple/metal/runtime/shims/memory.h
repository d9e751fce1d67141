// shimkit's declaration of ExecuTorch's Metal tensor memory API (backends/apple/metal/runtime/shims/
// memory.h), from its public signatures, for the Linux stand-in of the Metal runtime
// (runtime/native/tensors.cpp implements it over host memory).
#pragma once

#include <executorch/backends/apple/metal/runtime/shims/types.h>

#include <cstdint>

namespace executorch {
namespace backends {
namespace metal {

extern "C" {

AOTITorchError aoti_torch_create_tensor_from_blob_v2(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr, int64_t storage_offset,
    int32_t dtype, int32_t device_type, int32_t device_index, AOTITensorHandle* ret_new_tensor, int32_t layout,
    const uint8_t* opaque_metadata, int64_t opaque_metadata_size);

AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AOTITensorHandle* ret_new_tensor);

AOTITorchError aoti_torch_delete_tensor_object(AOTITensorHandle tensor);

AOTITorchError aoti_torch_copy_(AOTITensorHandle self, AOTITensorHandle src, int32_t non_blocking);

AOTITorchError aoti_torch__reinterpret_tensor(AOTITensorHandle self, int64_t ndim, const int64_t* sizes_ptr,
                                              const int64_t* strides_ptr, int64_t storage_offset,
                                              AOTITensorHandle* ret_new_tensor);

AOTITorchError aoti_torch_new_tensor_handle(Tensor* orig_handle, Tensor** new_handle);

void cleanup_memory();

}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch
