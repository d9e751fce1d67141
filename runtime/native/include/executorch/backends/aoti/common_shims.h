// shimkit's declaration of ExecuTorch's AOTI accessor API (backends/aoti/common_shims.h), written from
// its public signatures for the Linux stand-in of the Metal runtime (runtime/native). A tensor handle
// is an ExecuTorch etensor::Tensor*, as in the runtime on a Mac; adapters compiled against this header
// compile unchanged against upstream's (tests/test_metal_runtime_adapters.py checks both).
#pragma once

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstddef>
#include <cstdint>

#ifndef AOTI_SHIM_EXPORT
#define AOTI_SHIM_EXPORT __attribute__((visibility("default")))
#endif

namespace executorch {
namespace backends {
namespace aoti {

using executorch::runtime::Error;
using executorch::runtime::etensor::Tensor;

extern "C" {

using AOTIRuntimeError = Error;
using AOTITorchError = Error;

AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_data_ptr(Tensor* tensor, void** ret_data_ptr);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_storage_offset(Tensor* tensor, int64_t* ret_storage_offset);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_strides(Tensor* tensor, int64_t** ret_strides);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_dtype(Tensor* tensor, int32_t* ret_dtype);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_sizes(Tensor* tensor, int64_t** ret_sizes);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_storage_size(Tensor* tensor, int64_t* ret_size);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_device_index(Tensor* tensor, int32_t* ret_device_index);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_dim(Tensor* tensor, int64_t* ret_dim);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_get_numel(Tensor* tensor, int64_t* ret_numel);

AOTI_SHIM_EXPORT int32_t aoti_torch_device_type_cpu();
AOTI_SHIM_EXPORT int32_t aoti_torch_layout_strided();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_float32();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_bfloat16();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_float16();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_bool();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_int8();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_uint8();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_int16();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_int32();
AOTI_SHIM_EXPORT int32_t aoti_torch_dtype_int64();
AOTI_SHIM_EXPORT size_t aoti_torch_dtype_element_size(int32_t dtype);

AOTI_SHIM_EXPORT int32_t aoti_torch_grad_mode_is_enabled();
AOTI_SHIM_EXPORT void aoti_torch_grad_mode_set_enabled(bool enabled);
AOTI_SHIM_EXPORT void aoti_torch_warn(const char* func, const char* file, uint32_t line, const char* msg);

AOTI_SHIM_EXPORT AOTITorchError aoti_torch_clone_preserve_strides(Tensor* self, Tensor** ret_new_tensor);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_clone(Tensor* self, Tensor** ret_new_tensor);
AOTI_SHIM_EXPORT AOTITorchError aoti_torch_create_tensor_from_blob(
    void* data_ptr, int64_t ndim, const int64_t* sizes, const int64_t* strides, int64_t storage_offset,
    int32_t dtype, int32_t device_type, int32_t device_index, Tensor** ret_new_tensor);

}  // extern "C"

}  // namespace aoti
}  // namespace backends
}  // namespace executorch
