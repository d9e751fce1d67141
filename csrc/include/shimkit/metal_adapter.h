// What the plugins' c-shim adapters for ExecuTorch's Metal runtime (kernel/*_shim_mps.mm) share: the checks
// at the top of a shim, each failure logged under the shim's name as the runtime's own shims log theirs,
// and allocating its results.
//
// Header-only, because those adapters are built without the SDK sources (Kernel(uses_sdk=False)). A file
// that includes it needs ExecuTorch's Metal runtime headers on its include path (a Mac's runtime build, or
// shimkit's Linux stand-in in runtime/native/include), as shimkit/aoti_accessors.h needs torch's; the
// rest of the SDK does not.
#pragma once

#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "shimkit/c10_codes.h"
#include "shimkit/dense.h"
#include "shimkit/dtype.h"

// In the runtime's namespace, as the adapters: its Tensor, AOTITensorHandle and aoti_torch_empty_strided
// resolve here exactly as they do there.
namespace executorch {
namespace backends {
namespace metal {
namespace shimkit_adapter {

// False, logged, when any of `handles` is null.
inline bool non_null(const char* shim, std::initializer_list<const void*> handles) {
  for (const void* handle : handles) {
    if (handle == nullptr) {
      ET_LOG(Error, "%s: null tensor handle", shim);
      return false;
    }
  }
  return true;
}

// False, logged, unless `tensor` is dense and row-major: the MSL kernels index it by element.
inline bool check_contiguous(const char* shim, const char* argument, const Tensor& tensor) {
  if (shimkit::is_contiguous(tensor)) return true;
  ET_LOG(Error, "%s: %s must be contiguous", shim, argument);
  return false;
}

// The MSL type that names `tensor`'s variant of `kernel` (sort_stable_<type>), or nullptr, logged, when
// the kernel has no variant for its dtype.
inline const char* msl_variant_type(const char* shim, const char* kernel, const Tensor& tensor) {
  const char* type = shimkit::msl_type_name(static_cast<int32_t>(tensor.scalar_type()));
  if (type == nullptr) {
    ET_LOG(Error, "%s: dtype %d has no %s variant", shim, static_cast<int>(tensor.scalar_type()), kernel);
  }
  return type;
}

// A new dense row-major tensor of `sizes` and c10 scalar type `dtype`, on mps: the runtime keeps every
// tensor in Metal buffers.
inline Error empty_contiguous(const std::vector<int64_t>& sizes, int32_t dtype, AOTITensorHandle* out) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  return aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), dtype,
                                  shimkit::device_types::kMps, 0, out);
}

}  // namespace shimkit_adapter
}  // namespace metal
}  // namespace backends
}  // namespace executorch
