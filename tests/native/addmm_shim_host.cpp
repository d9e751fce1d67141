// aoti_torch_mps_addmm_out over host memory, for the fallback tests (tests/fallback_helpers.py): the addmm plugin's
// adapter body (addmm_shim.h) and portable plan with its reference kernel as the device, over libtorch's AOTI tensor
// API, under the runtime's symbol, so that its rules (validation, float32 accumulation rounded once, beta == 0 and
// alpha == 0, any strides) are checked beside the runtime's own fallbacks. Whole programs run the plugin's real
// Objective-C++ adapter (addmm_shim_mps.mm over MPSGraph) instead: shimkit.runtime.program.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <string>

#include "addmm_shim.h"
#include "shimkit/aoti_accessors.h"

extern "C" __attribute__((weak)) void shimkit_runtime_record_failure(const char* message);

namespace shimkit {
namespace addmm {
namespace {

struct HostDevice {
  static Status run(const Plan& plan, const Operands& ops) {
    const Device device = ops.mat1.device;  // the plan checked that all four share it
    if (device.type != DeviceType::kCPU && device.type != DeviceType::kMPS) {
      return Status::unsupported("addmm: operands on " + device_name(device) +
                                 "; the stand-in reads host memory (cpu, or the runtime's mps buffers)");
    }
    Operands host = ops;
    for (TensorView* view : {&host.out, &host.self, &host.mat1, &host.mat2}) view->device = Device{};
    return run_reference(plan, host);
  }
};

}  // namespace
}  // namespace addmm
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                          AtenTensorHandle mat1, AtenTensorHandle mat2, double beta,
                                                          double alpha) {
  using namespace shimkit::addmm;
  const auto code = shimkit::aoti::run_shim(
      "aoti_torch_mps_addmm_out",
      [&] { return addmm_out<shimkit::aoti::AccessorApi, HostDevice>(out, self, mat1, mat2, beta, alpha); },
      [](const std::string& message) {
        if (shimkit_runtime_record_failure != nullptr) shimkit_runtime_record_failure(message.c_str());
      });
  return code == shimkit::StatusCode::kOk ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

}  // extern "C"
