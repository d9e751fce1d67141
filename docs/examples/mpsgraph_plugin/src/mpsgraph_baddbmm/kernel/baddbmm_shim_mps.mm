// aoti_torch_mps_baddbmm_out for ExecuTorch's Metal runtime (backends/apple/metal/runtime), written against its
// headers as its own ops/op_*.mm are: tensors are read through the AOTI accessors, their buffers found in
// ptr_to_mtl_buffer, and the graph encoded on the current stream with executeMPSGraph. ExecuTorch's Metal runtime
// build compiles it from the Kernel record's runtime_sources; on Linux, shimkit compiles it as Objective-C++
// against shimkit.objc and its stand-in of those headers for `shimkit audit --execute`. Outside either build the
// runtime's headers are absent and the file is empty.
#if __has_include(<executorch/backends/apple/metal/runtime/ops/common.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/ops/common.h>

#include <exception>
#include <string>

#include "baddbmm.h"

namespace executorch {
namespace backends {
namespace metal {
namespace {

namespace aoti_api = executorch::backends::aoti;
using mpsgraph_baddbmm::Operand;

// The operand's dtype, sizes, strides and data pointer; "" or what could not be read.
std::string read_operand(AOTITensorHandle tensor, const char* name, Operand* operand, void** data) {
  int64_t dim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  int32_t dtype = 0;
  if (tensor == nullptr || aoti_api::aoti_torch_get_dim(tensor, &dim) != Error::Ok ||
      aoti_api::aoti_torch_get_sizes(tensor, &sizes) != Error::Ok ||
      aoti_api::aoti_torch_get_strides(tensor, &strides) != Error::Ok ||
      aoti_api::aoti_torch_get_dtype(tensor, &dtype) != Error::Ok ||
      aoti_api::aoti_torch_get_data_ptr(tensor, data) != Error::Ok) {
    return std::string("baddbmm: could not read the tensor ") + name;
  }
  operand->dtype = dtype;
  operand->sizes.assign(sizes, sizes + dim);
  operand->strides.assign(strides, strides + dim);
  return "";
}

// The runtime registers every data pointer it hands out with its buffer (allocations and no-copy views alike).
id<MTLBuffer> buffer_of(void* data) {
  auto found = ptr_to_mtl_buffer.find(data);
  return found == ptr_to_mtl_buffer.end() ? nil : found->second;
}

std::string baddbmm_out(AOTITensorHandle out, AOTITensorHandle self, AOTITensorHandle batch1,
                        AOTITensorHandle batch2, double beta, double alpha, Error* code) {
  *code = Error::InvalidArgument;
  Operand operands[4];
  void* data[4] = {};
  AOTITensorHandle handles[4] = {out, self, batch1, batch2};
  const char* names[4] = {"out", "self", "batch1", "batch2"};
  for (int i = 0; i < 4; ++i) {
    std::string error = read_operand(handles[i], names[i], &operands[i], &data[i]);
    if (!error.empty()) return error;
  }
  mpsgraph_baddbmm::Call call;
  std::string error = mpsgraph_baddbmm::plan_baddbmm(operands[0], operands[1], operands[2], operands[3], beta,
                                                     alpha, &call);
  if (!error.empty()) return error;
  if (call.out_numel() == 0) {
    *code = Error::Ok;
    return "";
  }
  mpsgraph_baddbmm::Buffers buffers;
  id<MTLBuffer>* slots[4] = {&buffers.out, &buffers.self, &buffers.batch1, &buffers.batch2};
  const bool used[4] = {true, call.uses_self(), call.uses_product(), call.uses_product()};
  for (int i = 0; i < 4; ++i) {
    if (!used[i]) continue;
    *slots[i] = buffer_of(data[i]);
    if (*slots[i] == nil) return std::string("baddbmm: ") + names[i] + " is not in a Metal buffer of this runtime";
  }
  ETMetalStream* stream = getCurrentMetalStream();
  if (stream == nullptr) {
    *code = Error::Internal;
    return "baddbmm: no current Metal stream";
  }
  std::string failure;
  error = mpsgraph_baddbmm::run_baddbmm(call, buffers, [&](MPSGraph* graph, NSDictionary* feeds,
                                                              NSDictionary* results) {
    try {
      stream->endKernelCoalescing();
      // executeMPSGraph only encodes: wait for the graph before run_baddbmm releases its tensor data.
      stream->executeMPSGraph(graph, feeds, results);
      stream->synchronize(SyncType::COMMIT_AND_WAIT);
    } catch (const std::exception& exception) {
      failure = std::string("baddbmm: the Metal stream failed: ") + exception.what();
    }
  });
  if (error.empty()) error = failure;
  *code = error.empty() ? Error::Ok : Error::Internal;
  return error;
}

}  // namespace

extern "C" {

AOTITorchError aoti_torch_mps_baddbmm_out(AOTITensorHandle out, AOTITensorHandle self, AOTITensorHandle batch1,
                                          AOTITensorHandle batch2, double beta, double alpha) {
  Error code = Error::Internal;
  std::string error;
  try {
    error = baddbmm_out(out, self, batch1, batch2, beta, alpha, &code);
  } catch (const std::exception& exception) {
    error = std::string("baddbmm: ") + exception.what();
    code = Error::Internal;
  }
  if (!error.empty()) ET_LOG(Error, "aoti_torch_mps_baddbmm_out: %s", error.c_str());
  return code;
}

}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch

#endif  // __has_include(<executorch/backends/apple/metal/runtime/ops/common.h>)
