// aoti_torch_get_size for ExecuTorch's Metal runtime: the accessor a generated program calls to read a size
// no one knew before it ran (RAIIAtenTensorHandle::size(d), nonzero's row count). The runtime has
// aoti_torch_get_sizes and aoti_torch_get_dim (backends/aoti/common_shims.h) but not this one, so a program
// returning nonzero's result did not link; written over those two. Plain C++: the Linux stand-in of the
// runtime compiles it as it is (tests/test_metal_program_adapters.py runs such a program end to end).
#include <executorch/backends/aoti/common_shims.h>

namespace executorch {
namespace backends {
namespace aoti {

extern "C" AOTITorchError aoti_torch_get_size(Tensor* tensor, int64_t d, int64_t* ret_size) {
  if (tensor == nullptr || ret_size == nullptr) return Error::InvalidArgument;
  int64_t dim = 0;
  Error error = aoti_torch_get_dim(tensor, &dim);
  if (error != Error::Ok) return error;
  if (d < 0) d += dim;  // Python's negative dimensions, as c10's size(d)
  if (d < 0 || d >= dim) return Error::InvalidArgument;
  int64_t* sizes = nullptr;
  error = aoti_torch_get_sizes(tensor, &sizes);
  if (error != Error::Ok) return error;
  *ret_size = sizes[d];
  return Error::Ok;
}

}  // namespace aoti
}  // namespace backends
}  // namespace executorch
