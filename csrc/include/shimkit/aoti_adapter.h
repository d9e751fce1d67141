// Reading AOTI tensor handles into TensorViews, and the C-ABI wrapper every c-shim shares.
//
// A c-shim is called by AOTInductor-generated code through the AOTI C accessor API
// (torch/csrc/inductor/aoti_torch/c/shim.h). libtorch implements that API over at::Tensor* and
// ExecuTorch over its own Tensor*, with the same extern "C" names but different handle types, so
// no translation unit can see both sets of declarations. The adapter is therefore templated on an
// `Api` policy that forwards to whichever set the including file declares:
//
//   struct Api {
//     using Handle = ...;  // AtenTensorHandle (libtorch) or executorch Tensor*
//     static int32_t get_data_ptr(Handle, void**);      // 0 on success, like the C API
//     static int32_t get_dim(Handle, int64_t*);
//     static int32_t get_sizes(Handle, int64_t**);
//     static int32_t get_strides(Handle, int64_t**);
//     static int32_t get_dtype(Handle, int32_t*);
//     static int32_t get_storage_offset(Handle, int64_t*);
//     static int32_t get_device(Handle, Device*);     // ExecuTorch has no device getter
//   };
//
// This header declares none of the AOTI functions itself, which keeps the kernel SDK free of
// libtorch: only the file instantiating an adapter needs an implementation of the API to link.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "shimkit/dtype.h"
#include "shimkit/status.h"
#include "shimkit/tensor_view.h"

namespace shimkit {
namespace aoti {

template <class Api>
Status read_view(typename Api::Handle handle, const char* name, TensorView* view) {
  const std::string arg(name);
  if (handle == nullptr) return Status::invalid_argument(arg + " is a null tensor handle");
  int64_t dim = 0;
  if (Api::get_dim(handle, &dim) != 0 || dim < 0) {
    return Status::invalid_argument("could not read the rank of " + arg);
  }
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  if (Api::get_sizes(handle, &sizes) != 0 || Api::get_strides(handle, &strides) != 0 ||
      (dim > 0 && (sizes == nullptr || strides == nullptr))) {
    return Status::invalid_argument("could not read the sizes and strides of " + arg);
  }
  int32_t code = 0;
  if (Api::get_dtype(handle, &code) != 0) {
    return Status::invalid_argument("could not read the dtype of " + arg);
  }
  DType dtype;
  if (!dtype_from_scalar_type(code, &dtype)) {
    return Status::invalid_argument(arg + " has dtype " + scalar_type_name(code) +
                                    "; supported: float32, bfloat16, float16");
  }
  TensorView result;
  result.dtype = dtype;
  result.sizes.assign(sizes, sizes + dim);
  result.strides.assign(strides, strides + dim);
  if (Api::get_data_ptr(handle, &result.data) != 0 ||
      Api::get_storage_offset(handle, &result.storage_offset) != 0 ||
      Api::get_device(handle, &result.device) != 0) {
    return Status::invalid_argument("could not read the data pointer, storage offset or device of " +
                                    arg);
  }
  *view = std::move(result);
  return Status::ok();
}

// The message of the last failed shim call on this thread, for hosts that do not read the log.
void set_last_error(std::string message);
const std::string& last_error();

// Runs `body` (returning Status) behind a C ABI: no exception escapes, and a failure is recorded
// as the last error, passed to `log` as "<symbol>: <message>", and returned as its StatusCode.
template <class Body, class Log>
StatusCode run_shim(const char* symbol, Body&& body, Log&& log) noexcept {
  Status status;
  try {
    status = body();
  } catch (const std::bad_alloc&) {
    status = Status::internal("out of memory");
  } catch (const std::exception& error) {
    status = Status::internal(error.what());
  } catch (...) {
    status = Status::internal("unknown exception");
  }
  if (status.is_ok()) return StatusCode::kOk;
  try {
    std::string message = std::string(symbol) + ": " + status.message();
    log(message);
    set_last_error(std::move(message));
  } catch (...) {
    // Reporting is best effort: the error code below still tells the caller it failed.
  }
  return status.code();
}

}  // namespace aoti
}  // namespace shimkit
