// Stands in for the Metal runtime's op_gather_qmv.mm: aoti_torch_mps_gather_qmv, ExecuTorch's
// metal::gather_qmv(x, w, scales, biases, expert_indices, group_size), the mixture-of-experts product
// y[i] = W[e] @ x[i] with e = expert_indices[i] and W[e][n, k] = scales[e, n, k / group_size] * q + biases[e, n,
// k / group_size] (MLX's affine 4-bit format: q the unsigned nibble k of w[e, n], low nibble first).
// Returns a new contiguous [P, N] tensor of x's dtype, accumulated in float32 and rounded once (the
// Python reference rounds the dequantized weights to the scales' dtype first; the Metal kernel does
// not, and neither does this).
//
// Rejected like upstream: group_size other than 32, 64, 128; ranks other than x [P, K], w [E, N, K/2],
// scales and biases [E, N, K/group_size], expert_indices [P]; x not float32 or bfloat16. Stricter than
// upstream, where these would be misread silently: w not uint8, scales or biases not of x's dtype or
// shape, K odd or not a multiple of group_size, expert_indices not int32 (the Metal kernel reads them as
// uint32; the upstream model casts them to int32) or out of [0, E). Operands are read through their
// strides (upstream assumes dense ones).
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

Status gather_qmv(AtenTensorHandle x_handle, AtenTensorHandle w_handle, AtenTensorHandle s_handle,
                  AtenTensorHandle z_handle, AtenTensorHandle index_handle, int64_t group_size, AtenTensorHandle* ret) {
  if (ret == nullptr) return invalid("ret must not be null");
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    return invalid("group_size " + std::to_string(group_size) + " is not one of 32, 64, 128");
  }
  Arg x, w, scales, biases, indices;
  SHIMKIT_RETURN_IF_ERROR(read_arg(x_handle, "x", &x));
  SHIMKIT_RETURN_IF_ERROR(read_arg(w_handle, "w", &w));
  SHIMKIT_RETURN_IF_ERROR(read_arg(s_handle, "scales", &scales));
  SHIMKIT_RETURN_IF_ERROR(read_arg(z_handle, "biases", &biases));
  SHIMKIT_RETURN_IF_ERROR(read_arg(index_handle, "expert_indices", &indices));
  SHIMKIT_RETURN_IF_ERROR(require_rank(x, 2, "(activations [P, K])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(w, 3, "(packed expert weights [E, N, K / 2])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(scales, 3, "([E, N, K / group_size])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(biases, 3, "([E, N, K / group_size])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(indices, 1, "([P])"));
  const int64_t pairs = x.size(0), k = x.size(1), experts = w.size(0), n = w.size(1);
  if (k % 2 != 0 || w.size(2) != k / 2) {
    return invalid("w must have K / 2 = " + std::to_string(k / 2) + " bytes per row for x's K = " +
                   std::to_string(k) + " (K even), got " + w.describe());
  }
  if (indices.size(0) != pairs) {
    return invalid("expert_indices has " + std::to_string(indices.size(0)) + " entries but x has P = " +
                   std::to_string(pairs) + " rows");
  }
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(x));
  SHIMKIT_RETURN_IF_ERROR(require_dtype(w, {uint8_code()}, "two 4-bit values per byte"));
  if (k % group_size != 0) {
    return invalid("x's K = " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(group_size) +
                   " (the Metal runtime's kernel strides experts by K / group_size groups per row)");
  }
  const int64_t groups = k / group_size;
  for (const Arg* params : {&scales, &biases}) {
    if (params->size(0) != experts || params->size(1) != n || params->size(2) != groups) {
      return invalid(params->name + " must be [E, N, K / group_size] = " + format_shape({experts, n, groups}) +
                     ", got " + params->describe());
    }
    SHIMKIT_RETURN_IF_ERROR(require_same_dtype(*params, x));
  }
  SHIMKIT_RETURN_IF_ERROR(require_dtype(indices, {int32_code()}, "the Metal kernel reads the indices as uint32"));
  const auto* index_data = static_cast<const int32_t*>(indices.view.data);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = index_data[i * indices.stride(0)];
    if (e < 0 || e >= experts) {
      return invalid("expert_indices[" + std::to_string(i) + "] = " + std::to_string(e) + " is not an expert index in [0, " +
                     std::to_string(experts) + ")");
    }
  }

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(x, {pairs, n}, x.code, "output", &output));
  const auto* packed = static_cast<const uint8_t*>(w.view.data);
  std::vector<float> row(static_cast<std::size_t>(k));
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t e = index_data[i * indices.stride(0)];
    for (int64_t p = 0; p < k; ++p) row[static_cast<std::size_t>(p)] = x.load(i * x.stride(0) + p * x.stride(1));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t w_row = e * w.stride(0) + j * w.stride(1);
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) {
        const uint8_t byte = packed[w_row + (p / 2) * w.stride(2)];
        const float q = static_cast<float>((p % 2 == 0) ? (byte & 0x0F) : (byte >> 4));
        const int64_t g = p / group_size;
        const float weight = scales.load(e * scales.stride(0) + j * scales.stride(1) + g * scales.stride(2)) * q +
                             biases.load(e * biases.stride(0) + j * biases.stride(1) + g * biases.stride(2));
        acc += weight * row[static_cast<std::size_t>(p)];
      }
      output.arg.store(i * output.arg.stride(0) + j * output.arg.stride(1), acc);
    }
  }
  return hand_over(&output, ret);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_gather_qmv(AtenTensorHandle X, AtenTensorHandle W, AtenTensorHandle S,
                                                           AtenTensorHandle Z, AtenTensorHandle ExpertIndices,
                                                           int64_t group_size, AtenTensorHandle* ret) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps_gather_qmv", [&] {
    return shimkit::metal_fallbacks::gather_qmv(X, W, S, Z, ExpertIndices, group_size, ret);
  });
}

}  // extern "C"
