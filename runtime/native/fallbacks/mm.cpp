// Stands in for the Metal runtime's op_mm.mm and op_bmm.mm: aoti_torch_mps_mm_out and
// aoti_torch_mps_bmm_out write out = self @ mat2 (batched for bmm), accumulated in float32 and rounded
// once to the operands' dtype, as ATen's CPU kernels do for bfloat16.
//
// Rejected like upstream: dtypes other than float32 and bfloat16 (upstream has no float16 here), and for
// bmm any operand that is not contiguous, because upstream feeds each to MPSGraph as a dense buffer and
// refuses other layouts. Upstream's mm checks neither mat2's nor out's dtype or shape and reads self
// as dense whatever its strides; here every mm operand is read through its strides and out is
// checked, so a wrong call fails instead of writing past out.
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

Status check_dtypes(const Arg& out, const Arg& self, const Arg& mat2) {
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(self));
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(mat2, self));
  return require_same_dtype(out, self);
}

Status mm_out(AtenTensorHandle out_handle, AtenTensorHandle self_handle, AtenTensorHandle mat2_handle) {
  Arg out, self, mat2;
  SHIMKIT_RETURN_IF_ERROR(read_arg(out_handle, "out", &out));
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat2_handle, "mat2", &mat2));
  SHIMKIT_RETURN_IF_ERROR(require_rank(self, 2, "(a matrix)"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(mat2, 2, "(a matrix)"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(out, 2, "(a matrix)"));
  SHIMKIT_RETURN_IF_ERROR(check_dtypes(out, self, mat2));
  const int64_t m = self.size(0), k = self.size(1), n = mat2.size(1);
  if (mat2.size(0) != k) {
    return invalid("self and mat2 shapes cannot be multiplied (" + std::to_string(m) + "x" + std::to_string(k) +
                   " and " + std::to_string(mat2.size(0)) + "x" + std::to_string(n) + ")");
  }
  if (out.size(0) != m || out.size(1) != n) {
    return invalid("out has shape " + format_shape(out.view.sizes) + " but self @ mat2 is " + format_shape({m, n}));
  }
  SHIMKIT_RETURN_IF_ERROR(require_writable(out));
  std::vector<float> result;
  batched_product(load_dense(self), load_dense(mat2), 1, m, k, n, &result);
  store_dense(out, result);
  return Status::ok();
}

constexpr const char* kDenseFeed = "the Metal runtime feeds bmm operands to MPSGraph as dense buffers";

Status bmm_out(AtenTensorHandle out_handle, AtenTensorHandle self_handle, AtenTensorHandle mat2_handle) {
  Arg out, self, mat2;
  SHIMKIT_RETURN_IF_ERROR(read_arg(out_handle, "out", &out));
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat2_handle, "mat2", &mat2));
  SHIMKIT_RETURN_IF_ERROR(require_rank(self, 3, "(a batch of matrices)"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(mat2, 3, "(a batch of matrices)"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(out, 3, "(a batch of matrices)"));
  const int64_t batch = self.size(0), m = self.size(1), k = self.size(2), n = mat2.size(2);
  if (mat2.size(0) != batch) {
    return invalid("batch size mismatch: mat2 has " + std::to_string(mat2.size(0)) + " matrices but self has " +
                   std::to_string(batch));
  }
  if (mat2.size(1) != k) {
    return invalid("self and mat2 shapes cannot be multiplied (" + format_shape(self.view.sizes) + " and " +
                   format_shape(mat2.view.sizes) + ")");
  }
  if (out.size(0) != batch || out.size(1) != m || out.size(2) != n) {
    return invalid("out has shape " + format_shape(out.view.sizes) + " but self @ mat2 is " +
                   format_shape({batch, m, n}));
  }
  SHIMKIT_RETURN_IF_ERROR(check_dtypes(out, self, mat2));
  SHIMKIT_RETURN_IF_ERROR(require_contiguous(self, kDenseFeed));
  SHIMKIT_RETURN_IF_ERROR(require_contiguous(mat2, kDenseFeed));
  SHIMKIT_RETURN_IF_ERROR(require_contiguous(out, kDenseFeed));
  std::vector<float> result;
  batched_product(load_dense(self), load_dense(mat2), batch, m, k, n, &result);
  store_dense(out, result);
  return Status::ok();
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                       AtenTensorHandle mat2) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps_mm_out",
                                       [&] { return shimkit::metal_fallbacks::mm_out(out, self, mat2); });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_bmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                        AtenTensorHandle mat2) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps_bmm_out",
                                       [&] { return shimkit::metal_fallbacks::bmm_out(out, self, mat2); });
}

}  // extern "C"
