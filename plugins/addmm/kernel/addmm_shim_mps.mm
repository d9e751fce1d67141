// aoti_torch_mps_addmm_out for ExecuTorch's Metal runtime, written against the headers of
// executorch/backends/apple/metal/runtime as op_mm.mm uses them. Not run on a Mac by shimkit's CI (none was
// available); on Linux it compiles unchanged against shimkit.objc's Metal and MPSGraph on the CPU and the stand-in's
// declaration of those headers, and whole programs (shimkit audit --execute) call it there.
//
// The same adapter body as the Linux reference symbol shimkit_ref_addmm_out (addmm_shim.h): handles
// are read through ExecuTorch's AOTI accessors, the portable plan validates and decides, and
// run_metal executes on the runtime's stream. It is only meaningful inside that runtime's build,
// which compiles it through the addmm plugin's kernel sources; elsewhere (shimkit._C on macOS) the
// runtime's headers are absent and the file is empty.
#if __has_include(<executorch/backends/apple/metal/runtime/ops/common.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/ops/common.h>

#include "addmm_metal.h"
#include "addmm_shim.h"

namespace executorch {
namespace backends {
namespace metal {
namespace {

namespace aoti_api = executorch::backends::aoti;

struct ExecuTorchApi {
  using Handle = AOTITensorHandle;
  static int32_t get_data_ptr(Handle h, void** out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_data_ptr(h, out));
  }
  static int32_t get_dim(Handle h, int64_t* out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_dim(h, out));
  }
  static int32_t get_sizes(Handle h, int64_t** out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_sizes(h, out));
  }
  static int32_t get_strides(Handle h, int64_t** out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_strides(h, out));
  }
  static int32_t get_dtype(Handle h, int32_t* out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_dtype(h, out));
  }
  static int32_t get_storage_offset(Handle h, int64_t* out) {
    return static_cast<int32_t>(aoti_api::aoti_torch_get_storage_offset(h, out));
  }
  // ExecuTorch's AOTI shims have no device getter; every tensor this runtime hands a shim is in one
  // of its Metal buffers.
  static int32_t get_device(Handle, shimkit::Device* out) {
    *out = {shimkit::DeviceType::kMPS, 0};
    return 0;
  }
};

class ExecuTorchHost : public shimkit::metal::Host {
 public:
  explicit ExecuTorchHost(ETMetalStream* stream) : stream_(stream) {}
  id<MTLDevice> device() override { return get_metal_device(); }
  id<MTLBuffer> buffer_for(const void* data, NSUInteger* byte_offset) override {
    // The runtime registers every data pointer it hands out, views included, with its own buffer.
    auto it = ptr_to_mtl_buffer.find(const_cast<void*>(data));
    if (it == ptr_to_mtl_buffer.end()) return nil;
    *byte_offset = 0;
    return it->second;
  }
  void synchronize() override { stream_->synchronize(SyncType::COMMIT_AND_WAIT); }
  void run_graph(MPSGraph* graph, NSDictionary* feeds, NSDictionary* results, bool wait) override {
    stream_->endKernelCoalescing();
    // executeMPSGraph only encodes, whatever sync type it is given (et_metal.mm:1175-1188 at cff6f4d): waiting
    // takes a synchronize of its own.
    stream_->executeMPSGraph(graph, feeds, results);
    if (wait) stream_->synchronize(SyncType::COMMIT_AND_WAIT);
  }

 private:
  ETMetalStream* stream_;
};

struct MetalDevice {
  static shimkit::Status run(const shimkit::addmm::Plan& plan, const shimkit::addmm::Operands& ops) {
    ETMetalStream* stream = getCurrentMetalStream();
    if (stream == nullptr) return shimkit::Status::internal("no current Metal stream");
    ExecuTorchHost host(stream);
    return shimkit::addmm::run_metal(plan, ops, host);
  }
};

}  // namespace

extern "C" {

AOTITorchError aoti_torch_mps_addmm_out(AOTITensorHandle out, AOTITensorHandle self,
                                        AOTITensorHandle mat1, AOTITensorHandle mat2, double beta,
                                        double alpha) {
  shimkit::StatusCode code = shimkit::aoti::run_shim(
      "aoti_torch_mps_addmm_out",
      [&] {
        return shimkit::addmm::addmm_out<ExecuTorchApi, MetalDevice>(out, self, mat1, mat2, beta, alpha);
      },
      [](const std::string& message) { ET_LOG(Error, "%s", message.c_str()); });
  switch (code) {
    case shimkit::StatusCode::kOk:
      return Error::Ok;
    case shimkit::StatusCode::kInvalidArgument:
      return Error::InvalidArgument;
    case shimkit::StatusCode::kUnsupported:
      return Error::NotSupported;
    case shimkit::StatusCode::kInternal:
      break;
  }
  return Error::Internal;
}

}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch

#endif  // __has_include(<executorch/backends/apple/metal/runtime/ops/common.h>)
