// Stands in for the Metal runtime's op_linear_4bit.mm: aoti_torch_mps__linear_fp_act_4bit_weight,
// torchao's _linear_fp_act_4bit_weight(A, B, group_size, S, Z) = A @ W^T with the 4-bit weight
// W[n, k] = S[n, k / group_size] * q[n, k] + Z[n, k / group_size] (torchao's "zeros" are added after
// scaling: quant_api stores them as -zero_point * scale), q[n, k] the unsigned nibble k of row n of B
// [N, K/2] (low nibble first, as the Metal kernels unpack it). Returns a new contiguous [M, N] tensor of A's dtype,
// accumulated in float32 (shimkit/matrix_product.h: k in order, a fused multiply-add per term) and rounded once, as
// op_linear_4bit.mm (pytorch/executorch cff6f4d) computes it: M == 1 runs qmv, whose dot products are float32
// throughout (:560-599); M > 1 runs affine_qmm_t, which dequantizes each weight into a threadgroup tile of A's dtype
// first (:995-1003, :1542-1543): for bfloat16 it rounds S * q and then the sum with Z to bfloat16 before the float32
// product, two roundings ATen's dequantized reference never makes.
//
// Refused as upstream refuses, in its order and with its messages (:1612-1730): group_size other than 32, 64, 128,
// 256; A not a 2-D float32 or bfloat16 tensor; B not 2-D uint8 of K/2 columns; K not a multiple of 8; N not a
// multiple of 4 unless M == 1; S or Z not [N, :] of A's dtype; an operand whose strides are not (size(1), 1), the
// test upstream makes (stricter than ATen's contiguity for dims of size 1); M == 0, for which it has no kernel
// (:1766-1790). Refused here where upstream's kernels would read past a buffer's end: K not a multiple of group_size,
// S or Z without exactly K / group_size columns.
#include <algorithm>

#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

// op_linear_4bit.mm's contiguity test, which dims of size 1 do not escape.
Status require_dense_rows(const Arg& arg) {
  if (arg.stride(1) == 1 && arg.stride(0) == arg.size(1)) return Status::ok();
  return invalid("expect " + arg.name + " to be contiguous, strides=[" + std::to_string(arg.stride(0)) + ", " +
                 std::to_string(arg.stride(1)) + "]");
}

Status check_params(const Arg& params, const Arg& a, int64_t n, int64_t groups) {
  if (params.dim() != 2 || params.size(0) != n) {
    return invalid("expect " + params.name + " to be 2D tensor with shape [" + std::to_string(n) + ", :], got " +
                   params.describe());
  }
  if (params.code != a.code) {
    return invalid("expect " + params.name + " dtype to match A dtype " + dtype_text(a.code) + ", got " +
                   dtype_text(params.code));
  }
  SHIMKIT_RETURN_IF_ERROR(require_dense_rows(params));
  if (params.size(1) != groups) {
    return invalid(params.name + " must be [N, K / group_size] = " + format_shape({n, groups}) + ", got " +
                   params.describe() + " (op_linear_4bit.mm's kernels read K / group_size columns without checking)");
  }
  return Status::ok();
}

Status linear_4bit(AtenTensorHandle a_handle, AtenTensorHandle b_handle, int64_t group_size,
                   AtenTensorHandle s_handle, AtenTensorHandle z_handle, AtenTensorHandle* ret) {
  if (ret == nullptr) return invalid("ret must not be null");
  if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256) {
    return invalid("Invalid group_size " + std::to_string(group_size) + " (must be 32, 64, 128, or 256)");
  }
  Arg a, b, s, z;
  SHIMKIT_RETURN_IF_ERROR(read_arg(a_handle, "A", &a));
  SHIMKIT_RETURN_IF_ERROR(read_arg(b_handle, "B", &b));
  SHIMKIT_RETURN_IF_ERROR(read_arg(s_handle, "S", &s));
  SHIMKIT_RETURN_IF_ERROR(read_arg(z_handle, "Z", &z));
  if (a.dim() != 2) return invalid("expect A to be 2D tensor, got " + std::to_string(a.dim()));
  if (a.code != float32_code() && a.code != bfloat16_code()) {
    return invalid("expect A to be 32-bit or 16-bit float tensor, got dtype " + dtype_text(a.code));
  }
  SHIMKIT_RETURN_IF_ERROR(require_dense_rows(a));
  if (b.dim() != 2) return invalid("expect B to be 2D tensor, got " + std::to_string(b.dim()));
  if (b.code != uint8_code()) return invalid("expect B to be uint8 tensor, got dtype " + dtype_text(b.code));
  SHIMKIT_RETURN_IF_ERROR(require_dense_rows(b));
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != (k / 8) * 4) {
    return invalid("expect B.size(1) == " + std::to_string((k / 8) * 4) + ", got " + std::to_string(b.size(1)));
  }
  if (k % 8 != 0) return invalid("expect K to be multiple of 8, got " + std::to_string(k));
  if (n % 4 != 0 && m != 1) {
    return invalid("expect N to be multiple of 4 when M != 1, got M=" + std::to_string(m) + ", N=" + std::to_string(n));
  }
  if (k % group_size != 0) {
    return invalid("K = " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(group_size) +
                   " (op_linear_4bit.mm's kernels index K / group_size groups per row)");
  }
  const int64_t groups = k / group_size;
  SHIMKIT_RETURN_IF_ERROR(check_params(s, a, n, groups));
  SHIMKIT_RETURN_IF_ERROR(check_params(z, a, n, groups));
  if (m < 1) {
    return invalid("No suitable kernel found for M=" + std::to_string(m) + ", N=" + std::to_string(n) +
                   ", K=" + std::to_string(k));
  }

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(a, {m, n}, a.code, "output", &output));
  const bool tiled = m > 1;  // affine_qmm_t's tiles hold the weights in A's dtype
  const auto* packed = static_cast<const uint8_t*>(b.view.data);
  // W [N, K] as the kernel upstream dequantizes it, a block of rows at a time (a reused buffer: a real layer's whole
  // weight would be hundreds of megabytes of fresh pages per call), each block's product written into y's columns.
  constexpr int64_t kBlockFloats = 1 << 22;  // 16 MB: large enough that a prompt's rows are packed few times
  const int64_t rows_per_block = std::max<int64_t>(64, kBlockFloats / std::max<int64_t>(1, k));
  const int64_t block_rows = std::min(n, rows_per_block);
  std::vector<float> w(static_cast<std::size_t>(block_rows * k)), block(static_cast<std::size_t>(m * block_rows));
  std::vector<float> y(static_cast<std::size_t>(m * n));
  const MatrixOperand x{a.view.data, a.view.dtype, 0, k, 1};
  for (int64_t first = 0; first < n; first += rows_per_block) {
    const int64_t rows = std::min(rows_per_block, n - first);
    parallel_for(rows, 2.0 * static_cast<double>(k), [&](int64_t first_row, int64_t last_row) {
      for (int64_t row = first + first_row; row < first + last_row; ++row) {
        for (int64_t group = 0; group < groups; ++group) {
          const int64_t g = row * groups + group;
          float values[16];  // a group's 16 possible weights
          for (int code = 0; code < 16; ++code) {
            const float q = static_cast<float>(code);
            const float scaled = s.load(g) * q;
            values[code] = tiled ? rounded(a, rounded(a, scaled) + z.load(g)) : scaled + z.load(g);
          }
          unpack_nibbles(packed + row * (k / 2) + group * (group_size / 2), group_size / 2, values,
                         w.data() + (row - first) * k + group * group_size);
        }
      }
    });
    matrix_product(1, m, k, rows, x, MatrixOperand{w.data(), DType::kFloat32, 0, 1, k}, block.data());  // W^T
    for (int64_t i = 0; i < m; ++i) {
      std::copy(block.begin() + i * rows, block.begin() + (i + 1) * rows, y.begin() + i * n + first);
    }
  }
  store_dense(output.arg, y);
  return hand_over(&output, ret);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps__linear_fp_act_4bit_weight(AtenTensorHandle A, AtenTensorHandle B,
                                                                           int64_t group_size, AtenTensorHandle S,
                                                                           AtenTensorHandle Z, AtenTensorHandle* ret) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps__linear_fp_act_4bit_weight", [&] {
    return shimkit::metal_fallbacks::linear_4bit(A, B, group_size, S, Z, ret);
  });
}

}  // extern "C"
