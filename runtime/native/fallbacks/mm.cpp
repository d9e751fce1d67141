// Stands in for the Metal runtime's op_mm.mm and op_bmm.mm (pytorch/executorch cff6f4d): aoti_torch_mps_mm_out and
// aoti_torch_mps_bmm_out write out = self @ mat2 (batched for bmm), accumulated in float32 (assumed of MPSGraph's
// matrix multiplication, as for addmm; shimkit/matrix_product.h: k in order, a fused multiply-add per term) and
// rounded once to the operands' dtype.
//
// What upstream's mm computes, where it is not what ATen computes (line numbers: op_mm.mm at cff6f4d; each noted as
// a divergence, so the verdict says so):
// - self is read through sizes() alone, as a dense [M, K] buffer (:133, :239-241); mat2 as dense [K, N], or as dense
//   [N, K] transposed when its strides are (1, not 1) (:70-80, :136-146), whatever its strides really are;
// - out's sizes and strides are never read: the [M, N] result is written densely from its data pointer (:233, :253).
// Refused as upstream refuses, with its messages (:23-26, :39-44, :52-57, :124-126). Refused here where upstream would
// read or write past a buffer's end or reinterpret one (every operand is bound as self's dtype, :111-127): an operand
// spanning fewer elements than the dense access takes, mat2 or out of another dtype than self's.
// bmm (op_bmm.mm at cff6f4d) reads every operand as a dense buffer too, but only after refusing any whose strides
// are not exactly [d1 * d2, d2, 1] for sizes [d0, d1, d2] (:113-141), dims of size 1 included, where ATen's
// is_contiguous lets those have any stride: what it computes is then ATen's, and every refusal is upstream's, in its
// order and with its messages (:23-26, :36-43, :52-78, :85-90, :113-141, :172-183). Refused here where upstream finds
// no Metal buffer, or hands MPSGraph a zero-length one, whose result nothing documents: an empty operand (the runtime
// allocates no 0-byte buffer, et_metal.mm:209-213, and get_mtl_buffer throws for a pointer it does not know,
// common.mm:18-24).
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

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
  store_dense(written, product(1, m, k, n, dense_self, dense_mat2));
  return Status::ok();
}

constexpr const char* kBmmFile = "op_bmm.mm";

// Sizes or strides as op_bmm.mm prints them: "[2,3,4]".
std::string printed(int64_t a, int64_t b, int64_t c) {
  return "[" + std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c) + "]";
}
std::string printed(const std::vector<int64_t>& three) { return printed(three[0], three[1], three[2]); }

Status require_bmm_strides(const Arg& arg) {
  const int64_t rows = arg.size(1), columns = arg.size(2);
  int64_t matrix = 0;  // an empty tensor's sizes are not bounded by read_arg: their product may not fit
  const bool too_large = __builtin_mul_overflow(rows, columns, &matrix);
  if (!too_large && arg.stride(2) == 1 && arg.stride(1) == columns && arg.stride(0) == matrix) return Status::ok();
  return invalid(arg.name + " tensor must be contiguous. Only dense row-major layout supported; transposed/view "
                 "tensors are unsupported. Expected strides=" + printed(matrix, columns, 1) + " for shape=" +
                 printed(arg.view.sizes) + ", got strides=" + printed(arg.view.strides) + "." +
                 (arg.contiguous() ? std::string(" (") + kBmmFile +
                                         " checks the strides of dims of size 0 or 1 too; ATen's is_contiguous ignores "
                                         "them)"
                                   : ""));
}

Status bmm_out(AtenTensorHandle out_handle, AtenTensorHandle self_handle, AtenTensorHandle mat2_handle) {
  if (out_handle == nullptr || self_handle == nullptr || mat2_handle == nullptr) return invalid("null tensor handles");
  Arg out, self, mat2;
  SHIMKIT_RETURN_IF_ERROR(read_arg(out_handle, "out", &out));
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  SHIMKIT_RETURN_IF_ERROR(read_arg(mat2_handle, "mat2", &mat2));
  if (self.dim() != 3 || mat2.dim() != 3 || out.dim() != 3) {
    return invalid("tensors must be 3-D. Got self.dim=" + std::to_string(self.dim()) + ", mat2.dim=" +
                   std::to_string(mat2.dim()) + ", out.dim=" + std::to_string(out.dim()));
  }
  const int64_t batch = self.size(0), m = self.size(1), k = self.size(2), n = mat2.size(2);
  if (mat2.size(0) != batch) {
    return invalid("batch size mismatch. Expected mat2[0]=" + std::to_string(mat2.size(0)) + " to match self[0]=" +
                   std::to_string(batch) + ". self.shape=" + printed(self.view.sizes) + ", mat2.shape=" +
                   printed(mat2.view.sizes));
  }
  if (mat2.size(1) != k) {
    return invalid("incompatible matrix dimensions for bmm. Expected mat2[1]=" + std::to_string(mat2.size(1)) +
                   " to match self[2]=" + std::to_string(k) + ". Cannot multiply " + printed(self.view.sizes) +
                   " @ " + printed(mat2.view.sizes));
  }
  if (out.size(0) != batch || out.size(1) != m || out.size(2) != n) {
    return invalid("output shape mismatch. Expected out.shape=" + printed(batch, m, n) + ", got " +
                   printed(out.view.sizes));
  }
  if (self.code != mat2.code || self.code != out.code) {
    return invalid("dtype mismatch. All tensors must have same dtype. Got self.dtype=" + std::to_string(self.code) +
                   ", mat2.dtype=" + std::to_string(mat2.code) + ", out.dtype=" + std::to_string(out.code));
  }
  for (const Arg* operand : {&self, &mat2, &out}) SHIMKIT_RETURN_IF_ERROR(require_bmm_strides(*operand));
  for (const Arg* operand : {&self, &mat2, &out}) {
    if (operand->numel() == 0) {
      return invalid(operand->name + " tensor not found in Metal buffer mapping: " + operand->name + " " +
                     operand->describe() + " is empty, and the Metal runtime allocates no 0-byte buffer " +
                     "(et_metal.mm:209-213) for get_mtl_buffer to find (common.mm:18-24)");
    }
  }
  if (self.code != float32_code() && self.code != bfloat16_code()) {
    return invalid("Unsupported data type: " + std::to_string(self.code) + ". Supported types: FLOAT32 (" +
                   std::to_string(float32_code()) + "), BFLOAT16 (" + std::to_string(bfloat16_code()) + ")");
  }
  store_dense(out, product(batch, m, k, n, self, mat2));
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
