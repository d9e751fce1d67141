// Stands in for the Metal runtime's op_mm.mm and op_bmm.mm (pytorch/executorch cff6f4d): aoti_torch_mps_mm_out and
// aoti_torch_mps_bmm_out write out = self @ mat2 (batched for bmm), accumulated in float32 (assumed of MPSGraph's
// matrix multiplication, as for addmm) and rounded once to the operands' dtype.
//
// What upstream's mm computes, where it is not what ATen computes (line numbers: op_mm.mm at cff6f4d; each noted as
// a divergence, so the verdict says so):
// - self is read through sizes() alone, as a dense [M, K] buffer (:133, :239-241); mat2 as dense [K, N], or as dense
//   [N, K] transposed when its strides are (1, not 1) (:70-80, :136-146), whatever its strides really are;
// - out's sizes and strides are never read: the [M, N] result is written densely from its data pointer (:233, :253).
// Refused as upstream refuses, with its messages (:23-26, :39-44, :52-57, :124-126). Refused here where upstream would
// read or write past a buffer's end or reinterpret one (every operand is bound as self's dtype, :111-127): an operand
// spanning fewer elements than the dense access takes, mat2 or out of another dtype than self's.
// bmm: every operand must be contiguous, as upstream feeds each to MPSGraph as a dense buffer and refuses others.
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

Status check_dtypes(const Arg& out, const Arg& self, const Arg& mat2) {
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(self));
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(mat2, self));
  return require_same_dtype(out, self);
}

constexpr const char* kMmSymbol = "aoti_torch_mps_mm_out";
constexpr const char* kMmFile = "op_mm.mm";

Status mm_out(AtenTensorHandle out_handle, AtenTensorHandle self_handle, AtenTensorHandle mat2_handle) {
  if (out_handle == nullptr || self_handle == nullptr || mat2_handle == nullptr) return invalid("null tensor handles");
  Arg out, self, mat2;
  SHIMKIT_RETURN_IF_ERROR(read_arg(out_handle, "out", &out));
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat2_handle, "mat2", &mat2));
  if (self.dim() != 2 || mat2.dim() != 2) {
    return invalid("tensors must be 2-D, got " + std::to_string(self.dim()) + " and " + std::to_string(mat2.dim()));
  }
  const int64_t m = self.size(0), k = self.size(1), n = mat2.size(1);
  if (mat2.size(0) != k) {
    return invalid("incompatible matrix sizes for mm (" + std::to_string(m) + "x" + std::to_string(k) + " and " +
                   std::to_string(mat2.size(0)) + "x" + std::to_string(n) + ")");
  }
  if (self.code != float32_code() && self.code != bfloat16_code()) {
    return invalid("Unsupported data type for matrix multiplication");
  }
  for (const Arg* other : {&mat2, &out}) SHIMKIT_RETURN_IF_ERROR(require_bound_as(*other, self, kMmFile));
  Arg dense_self, dense_mat2;
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kMmSymbol, kMmFile, "", self, {k, 1}, "a dense [M, K] buffer", &dense_self));
  SHIMKIT_RETURN_IF_ERROR(read_mat2_as_upstream(kMmSymbol, kMmFile, mat2, k, n, &dense_mat2));
  Arg written;
  SHIMKIT_RETURN_IF_ERROR(write_out_as_upstream(kMmSymbol, kMmFile, out, m, n, &written));
  std::vector<float> result;
  batched_product(load_dense(dense_self), load_dense(dense_mat2), 1, m, k, n, &result);
  store_dense(written, result);
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
