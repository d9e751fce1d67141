// Stands in for the Metal runtime's op_linear_4bit.mm: aoti_torch_mps__linear_fp_act_4bit_weight,
// torchao's _linear_fp_act_4bit_weight(A, B, group_size, S, Z) = A @ W^T with the 4-bit weight
// W[n, k] = S[n, k / group_size] * q[n, k] + Z[n, k / group_size] (torchao's "zeros" are added after
// scaling: quant_api stores them as -zero_point * scale), q[n, k] the unsigned nibble k of row n of B
// [N, K/2] (low nibble first, as the Metal kernels unpack it). Returns a new contiguous [M, N] tensor
// of A's dtype, accumulated in float32 and rounded once.
//
// Rejected like upstream (and torchao's meta function): group_size other than 32, 64, 128, 256; A not
// a 2-D float32 or bfloat16 tensor; B not 2-D uint8 of K/2 columns; K not a multiple of 8; N not a
// multiple of 4 unless M == 1; S or Z not [N, groups] of A's dtype; any of them not contiguous.
// Stricter than upstream: K must be a multiple of group_size and S, Z must have exactly K/group_size
// columns, which upstream's kernels assume without checking. Upstream has no kernel for M == 0; here
// it gives an empty result.
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

constexpr const char* kContiguous = "the Metal runtime's kernels read it densely, as torchao's op requires";

Status check_params(const Arg& params, const Arg& a, int64_t n, int64_t groups) {
  if (params.dim() != 2 || params.size(0) != n || params.size(1) != groups) {
    return invalid(params.name + " must be [N, K / group_size] = " + format_shape({n, groups}) + ", got " +
                   params.describe());
  }
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(params, a));
  return require_contiguous(params, kContiguous);
}

Status linear_4bit(AtenTensorHandle a_handle, AtenTensorHandle b_handle, int64_t group_size,
                   AtenTensorHandle s_handle, AtenTensorHandle z_handle, AtenTensorHandle* ret) {
  if (ret == nullptr) return invalid("ret must not be null");
  if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256) {
    return invalid("group_size " + std::to_string(group_size) + " is not one of 32, 64, 128, 256");
  }
  Arg a, b, s, z;
  SHIMKIT_RETURN_IF_ERROR(read_arg(a_handle, "A", &a));
  SHIMKIT_RETURN_IF_ERROR(read_arg(b_handle, "B", &b));
  SHIMKIT_RETURN_IF_ERROR(read_arg(s_handle, "S", &s));
  SHIMKIT_RETURN_IF_ERROR(read_arg(z_handle, "Z", &z));
  SHIMKIT_RETURN_IF_ERROR(require_rank(a, 2, "(activations [M, K])"));
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(a));
  SHIMKIT_RETURN_IF_ERROR(require_contiguous(a, kContiguous));
  SHIMKIT_RETURN_IF_ERROR(require_rank(b, 2, "(packed weights [N, K / 2])"));
  SHIMKIT_RETURN_IF_ERROR(require_dtype(b, {uint8_code()}, "two 4-bit values per byte"));
  SHIMKIT_RETURN_IF_ERROR(require_contiguous(b, kContiguous));
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != k / 2) {
    return invalid("B must have K / 2 = " + std::to_string(k / 2) + " columns for A's K = " + std::to_string(k) +
                   ", got " + b.describe());
  }
  if (k % 8 != 0) return invalid("A's K = " + std::to_string(k) + " is not a multiple of 8");
  if (n % 4 != 0 && m != 1) {
    return invalid("N = " + std::to_string(n) + " (B's rows) must be a multiple of 4 when M = " + std::to_string(m) +
                   " != 1");
  }
  if (k % group_size != 0) {
    return invalid("A's K = " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(group_size) +
                   " (the Metal runtime's kernels index K / group_size groups per row)");
  }
  const int64_t groups = k / group_size;
  SHIMKIT_RETURN_IF_ERROR(check_params(s, a, n, groups));
  SHIMKIT_RETURN_IF_ERROR(check_params(z, a, n, groups));

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(a, {m, n}, a.code, "output", &output));
  if (m > 0 && n > 0) {
    // The weights dequantized once, in float32.
    const auto* packed = static_cast<const uint8_t*>(b.view.data);
    std::vector<float> w(static_cast<std::size_t>(n * k));
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t col = 0; col < k; ++col) {
        const uint8_t byte = packed[row * b.stride(0) + (col / 2) * b.stride(1)];
        const float q = static_cast<float>((col % 2 == 0) ? (byte & 0x0F) : (byte >> 4));
        const int64_t g = col / group_size;
        w[static_cast<std::size_t>(row * k + col)] =
            s.load(row * s.stride(0) + g * s.stride(1)) * q + z.load(row * z.stride(0) + g * z.stride(1));
      }
    }
    const std::vector<float> x = load_dense(a);
    std::vector<float> y(static_cast<std::size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
          acc += x[static_cast<std::size_t>(i * k + p)] * w[static_cast<std::size_t>(j * k + p)];
        }
        y[static_cast<std::size_t>(i * n + j)] = acc;
      }
    }
    store_dense(output.arg, y);
  }
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
