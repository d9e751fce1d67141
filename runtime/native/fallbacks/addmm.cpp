// Stands in for the Metal runtime's op_addmm.mm, aoti_torch_mps_addmm_out, which executorch 1.5.1's MetalBackend
// allow-lists: pytorch/executorch PR #19924 as merged (7dc3552, "Address review: harden Metal addmm shim"; the
// text of 5634e0c). Line numbers below are that file's.
//
// out = beta * self + alpha * (mat1 @ mat2), computed as upstream's MPSGraph is built (:210-237): the product of
// mat1 and mat2 in their dtype (its float32 accumulation assumed, as MPS's matrix multiplication does for 16-bit
// types: shimkit/matrix_product.h), multiplied by alpha only where alpha != 1, plus self multiplied by beta only
// where beta != 1, each graph operation rounding once to the dtype, so bfloat16 rounds up to three times where ATen
// rounds once.
//
// What upstream computes, where it is not what ATen computes (each noted as a divergence, so the verdict says so):
// - mat1 and self are read through sizes() alone (:66-68, :137, :141-150): memory laid out otherwise is read as a
//   dense buffer; mat2 is read as dense [K, N], or as dense [N, K] transposed when its strides are (1, not 1)
//   (:96-102, :138-139), whatever its strides really are;
// - out's sizes and strides are never read: the [M, N] result is written densely from its data pointer (:248,
//   :268-272);
// - beta == 0 still reads self (multiplied by 0): NaN and infinities in it reach the result, where ATen ignores it.
// Refused as upstream refuses, with its messages (:44-47, :57-64, :70-78, :80-94, :126-135). Refused here to keep
// the stand-in's memory safe, where upstream would read or write past a buffer's end: an operand whose view spans
// fewer elements than the dense read takes, and self that MPSGraph's addition cannot broadcast to [M, N].
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

constexpr const char* kSymbol = "aoti_torch_mps_addmm_out";
constexpr const char* kFile = "op_addmm.mm";

Status addmm_out(AtenTensorHandle out_handle, AtenTensorHandle self_handle, AtenTensorHandle mat1_handle,
                 AtenTensorHandle mat2_handle, double beta, double alpha) {
  if (out_handle == nullptr || self_handle == nullptr || mat1_handle == nullptr || mat2_handle == nullptr) {
    return invalid("null tensor handles");
  }
  Arg out, self, mat1, mat2;
  SHIMKIT_RETURN_IF_ERROR(read_arg(out_handle, "out", &out));
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat1_handle, "mat1", &mat1));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat2_handle, "mat2", &mat2));
  if (mat1.dim() != 2 || mat2.dim() != 2) {
    return invalid("mat1/mat2 must be 2-D, got " + std::to_string(mat1.dim()) + " and " + std::to_string(mat2.dim()));
  }
  const int64_t m = mat1.size(0), k = mat1.size(1), n = mat2.size(1);
  if (mat2.size(0) != k) {
    return invalid("incompatible matrix sizes (" + std::to_string(m) + "x" + std::to_string(k) + " and " +
                   std::to_string(mat2.size(0)) + "x" + std::to_string(n) + ")");
  }
  if (mat2.code != mat1.code || self.code != mat1.code || out.code != mat1.code) {
    return invalid("dtype mismatch across operands (mat1=" + std::to_string(mat1.code) + ", mat2=" +
                   std::to_string(mat2.code) + ", self=" + std::to_string(self.code) + ", out=" +
                   std::to_string(out.code) + ")");
  }
  if (mat1.code != float32_code() && mat1.code != bfloat16_code()) return invalid("Unsupported data type for addmm");
  if (self.dim() > 2) {
    return invalid("self " + self.describe() + " does not broadcast to the [" + std::to_string(m) + ", " +
                   std::to_string(n) + "] product: MPSGraph's addition refuses it");
  }
  for (int64_t d = 0; d < self.dim(); ++d) {  // right-aligned against [M, N], as MPSGraph broadcasts
    const int64_t against = d == self.dim() - 1 ? n : m;
    if (self.size(d) != 1 && self.size(d) != against) {
      return invalid("self " + self.describe() + " does not broadcast to the [" + std::to_string(m) + ", " +
                     std::to_string(n) + "] product: MPSGraph's addition refuses it");
    }
  }

  Arg dense_mat1, dense_mat2, dense_self;
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kSymbol, kFile, "", mat1, {k, 1}, "a dense [M, K] buffer", &dense_mat1));
  SHIMKIT_RETURN_IF_ERROR(read_mat2_as_upstream(kSymbol, kFile, mat2, k, n, &dense_mat2));
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kSymbol, kFile, "", self, contiguous_strides(self.view.sizes),
                                           "a dense buffer", &dense_self));
  Arg written;
  SHIMKIT_RETURN_IF_ERROR(write_out_as_upstream(kSymbol, kFile, out, m, n, &written));
  if (beta == 0.0) {
    note_divergence(kSymbol, "multiplies self by beta=0 where ATen ignores it, so NaN and infinities in self reach "
                             "the result", self.layout());
  }

  const std::vector<float> products = product(1, m, k, n, dense_mat1, dense_mat2);
  const std::vector<float> bias = load_dense(dense_self);
  const float alpha_value = rounded(mat1, static_cast<float>(alpha));  // constantWithScalar: ... dataType: the dtype
  const float beta_value = rounded(mat1, static_cast<float>(beta));
  std::vector<float> result(static_cast<std::size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float term = rounded(mat1, products[static_cast<std::size_t>(i * n + j)]);
      if (alpha != 1.0) term = rounded(mat1, term * alpha_value);
      const int64_t row = self.dim() == 2 && self.size(0) != 1 ? i : 0;
      const int64_t column = self.dim() >= 1 && self.size(self.dim() - 1) != 1 ? j : 0;
      float added = bias[static_cast<std::size_t>(row * (self.dim() >= 1 ? self.size(self.dim() - 1) : 1) + column)];
      if (beta != 1.0) added = rounded(mat1, added * beta_value);
      result[static_cast<std::size_t>(i * n + j)] = term + added;
    }
  }
  store_dense(written, result);
  return Status::ok();
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                          AtenTensorHandle mat1, AtenTensorHandle mat2, double beta,
                                                          double alpha) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps_addmm_out", [&] {
    return shimkit::metal_fallbacks::addmm_out(out, self, mat1, mat2, beta, alpha);
  });
}

}  // extern "C"
