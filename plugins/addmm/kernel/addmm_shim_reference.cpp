// The addmm c-shim for the reference device, exported as shimkit_ref_addmm_out.
//
// It is the same adapter body as aoti_torch_mps_addmm_out, instantiated over libtorch's
// implementation of the AOTI C accessor API, so that on Linux it can be called with real
// AtenTensorHandles (at::Tensor*) and prove the adapter, not only the kernel. The name avoids
// aoti_torch_cpu_addmm_out, which libtorch itself exports.
// It is compiled only into the addmm kernel's host module, which links libtorch_cpu
// (Kernel(links_libtorch=True)); the runtime build never sees it.

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdio>

#include "addmm_shim.h"

namespace shimkit {
namespace addmm {
namespace {

struct LibtorchApi {
  using Handle = AtenTensorHandle;
  static int32_t get_data_ptr(Handle h, void** out) { return aoti_torch_get_data_ptr(h, out); }
  static int32_t get_dim(Handle h, int64_t* out) { return aoti_torch_get_dim(h, out); }
  static int32_t get_sizes(Handle h, int64_t** out) { return aoti_torch_get_sizes(h, out); }
  static int32_t get_strides(Handle h, int64_t** out) { return aoti_torch_get_strides(h, out); }
  static int32_t get_dtype(Handle h, int32_t* out) { return aoti_torch_get_dtype(h, out); }
  static int32_t get_storage_offset(Handle h, int64_t* out) {
    return aoti_torch_get_storage_offset(h, out);
  }
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

struct ReferenceDevice {
  static Status run(const Plan& plan, const Operands& ops) { return run_reference(plan, ops); }
};

}  // namespace
}  // namespace addmm
}  // namespace shimkit

extern "C" {

__attribute__((visibility("default"))) AOTITorchError shimkit_ref_addmm_out(
    AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1, AtenTensorHandle mat2,
    double beta, double alpha) {
  using namespace shimkit::addmm;
  auto code = shimkit::aoti::run_shim(
      "shimkit_ref_addmm_out",
      [&] { return addmm_out<LibtorchApi, ReferenceDevice>(out, self, mat1, mat2, beta, alpha); },
      // libtorch's own shims report failures on stderr; do the same.
      [](const std::string& message) { std::fprintf(stderr, "%s\n", message.c_str()); });
  return code == shimkit::StatusCode::kOk ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

// The message of this thread's last failed shimkit_ref_* call ("" if none failed).
__attribute__((visibility("default"))) const char* shimkit_ref_last_error(void) {
  return shimkit::aoti::last_error().c_str();
}

}  // extern "C"

