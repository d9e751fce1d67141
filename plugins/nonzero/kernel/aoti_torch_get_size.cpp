// aoti_torch_get_size for ExecuTorch's Metal and CUDA runtimes: the accessor a generated program calls to read
// a size no one knew before it ran (RAIIAtenTensorHandle::size(d) in torch/csrc/inductor/aoti_runtime/utils.h,
// nonzero's row count). Both runtimes have aoti_torch_get_sizes and aoti_torch_get_dim (Metal:
// backends/aoti/common_shims.h; CUDA: backends/aoti/common_shims_slim.h) but not this one, so a program
// returning nonzero's result did not link; written over those two.
//
// Against the AOTI c-shim ABI alone, as the CUDA nonzero shim is: each runtime defines those two C symbols
// over its own tensor type (an etensor::Tensor* on Metal, a SlimTensor* on CUDA), and the handle is only
// passed through. The codes returned are ExecuTorch's Error values (runtime/core/error.h); a failing call
// returns its own. Plain C++: the Linux stand-in of the Metal runtime compiles it as it is
// (tests/test_metal_program_adapters.py runs such a program end to end). Not for libtorch, which has it.
#include <cstdint>

#if defined(_WIN32)
#define SHIMKIT_EXPORT __declspec(dllexport)
#else
#define SHIMKIT_EXPORT __attribute__((visibility("default")))
#endif

struct AtenTensorOpaque;
typedef AtenTensorOpaque* AtenTensorHandle;
typedef int32_t AOTITorchError;

extern "C" {
AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim);
AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes);
}

extern "C" SHIMKIT_EXPORT AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret_size) {
  constexpr AOTITorchError kOk = 0x00;
  constexpr AOTITorchError kInvalidArgument = 0x12;
  if (tensor == nullptr || ret_size == nullptr) return kInvalidArgument;
  int64_t dim = 0;
  AOTITorchError error = aoti_torch_get_dim(tensor, &dim);
  if (error != kOk) return error;
  if (d < 0) d += dim;  // Python's negative dimensions, as c10's size(d)
  if (d < 0 || d >= dim) return kInvalidArgument;
  int64_t* sizes = nullptr;
  error = aoti_torch_get_sizes(tensor, &sizes);
  if (error != kOk) return error;
  if (sizes == nullptr) return kInvalidArgument;
  *ret_size = sizes[d];
  return kOk;
}
