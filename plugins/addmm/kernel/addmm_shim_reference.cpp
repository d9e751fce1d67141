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
#include "shimkit/aoti_accessors.h"

namespace shimkit {
namespace addmm {
namespace {

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
      [&] { return addmm_out<shimkit::aoti::AccessorApi, ReferenceDevice>(out, self, mat1, mat2, beta, alpha); },
      // libtorch's own shims report failures on stderr; do the same.
      [](const std::string& message) { std::fprintf(stderr, "%s\n", message.c_str()); });
  return code == shimkit::StatusCode::kOk ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

// The message of this thread's last failed shimkit_ref_* call ("" if none failed).
__attribute__((visibility("default"))) const char* shimkit_ref_last_error(void) {
  return shimkit::aoti::last_error().c_str();
}

}  // extern "C"

