// aoti_torch_mps_addmm_out in shimkit's Linux stand-in of ExecuTorch's Metal runtime (runtime/native,
// where whole lowered programs run: shimkit audit --execute). On the Mac the symbol is addmm_shim_mps.mm's
// (MPSGraph); here it is the same adapter body (addmm_shim.h) and the same portable plan, with the plugin's
// reference kernel as the device: float32, bfloat16 and float16, accumulated in float32 and rounded once;
// beta == 0 ignores self and alpha == 0 ignores the product; any strides. The runtime's "mps" buffers are
// host memory, which the reference kernel reads directly.
//
// Compiled from the kernel's standin_sources, with addmm_plan.cpp (a runtime source) and addmm_reference.cpp.
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
