// Stands in for the Metal runtime's op_gather_qmv.mm: aoti_torch_mps_gather_qmv, ExecuTorch's
// metal::gather_qmv(x, w, scales, biases, expert_indices, group_size), the mixture-of-experts product
// y[i] = W[e] @ x[i] with e = expert_indices[i] and W[e][n, k] = scales[e, n, k / group_size] * q + biases[e, n,
// k / group_size] (MLX's affine 4-bit format: q the unsigned nibble k of w[e, n], low nibble first).
// Returns a new contiguous [P, N] tensor of x's dtype, accumulated in float32 (shimkit/matrix_product.h) and rounded
// once, as the Metal kernel (op_gather_qmv.mm:149-193, pytorch/executorch cff6f4d) does; the Python reference rounds
// the dequantized weights to the scales' dtype first.
//
// What upstream reads (each noted as a divergence where an operand's strides say otherwise): every operand through
// sizes() alone, as a dense buffer from its data pointer: x as [P, K] (:168), w, scales and biases as [E, N, ...] with
// the experts N * K / 2 bytes and N * K / group_size elements apart (:165, :534-540), expert_indices as P dense
// uint32 (:130, :149).
// No pairs are refused as upstream fails them (its 0-byte output has no buffer, ops/common.mm:35-38); an N between 4
// and 8 is computed as intended and noted as a divergence: upstream's small-N path is undefined there (:270-300).
// Refused as upstream refuses, with its messages (:404-406, :424-464, :467-480): group_size other than 32, 64, 128,
// ranks other than x [P, K], w [E, N, K/2], scales and biases [E, N, K/group_size], expert_indices [P], x not float32
// or bfloat16. Refused here where upstream would read past a buffer's end or reinterpret one (the kernel binds scales
// and biases as x's dtype, w as bytes and the indices as uint32): scales or biases not of x's dtype or shape, w not
// uint8, expert_indices not int32 (the upstream model casts them to int32) or out of [0, E), K odd or not a multiple
// of group_size, an operand spanning fewer elements than the dense read takes.
#include <algorithm>

#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

constexpr const char* kSymbol = "aoti_torch_mps_gather_qmv";
constexpr const char* kFile = "op_gather_qmv.mm";
// The kernel's tiling (op_gather_qmv.mm:240-241): two simdgroups of four output rows each per threadgroup.
constexpr int64_t kNumSimdgroups = 2;
constexpr int64_t kResultsPerSimdgroup = 4;

Status rank_is(const Arg& arg, int64_t rank, const char* layout) {
  if (arg.dim() == rank) return Status::ok();
  return invalid(arg.name + " must be " + std::to_string(rank) + "D" + layout + ", got " + std::to_string(arg.dim()));
}

Status read_densely(const Arg& arg, const char* assumed, Arg* read) {
  return read_as_upstream(kSymbol, kFile, "", arg, contiguous_strides(arg.view.sizes), assumed, read);
}

Status gather_qmv(AtenTensorHandle x_handle, AtenTensorHandle w_handle, AtenTensorHandle s_handle,
                  AtenTensorHandle z_handle, AtenTensorHandle index_handle, int64_t group_size, AtenTensorHandle* ret) {
  if (ret == nullptr) return invalid("ret must not be null");
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    return invalid("Invalid group_size " + std::to_string(group_size) + " (must be 32, 64, or 128)");
  }
  Arg x, w, scales, biases, indices;
  SHIMKIT_RETURN_IF_ERROR(read_arg(x_handle, "x", &x));
  SHIMKIT_RETURN_IF_ERROR(read_arg(w_handle, "w", &w));
  SHIMKIT_RETURN_IF_ERROR(read_arg(s_handle, "scales", &scales));
  SHIMKIT_RETURN_IF_ERROR(read_arg(z_handle, "biases", &biases));
  SHIMKIT_RETURN_IF_ERROR(read_arg(index_handle, "expert_indices", &indices));
  SHIMKIT_RETURN_IF_ERROR(rank_is(x, 2, ""));
  SHIMKIT_RETURN_IF_ERROR(rank_is(w, 3, " [E, N, K_packed]"));
  SHIMKIT_RETURN_IF_ERROR(rank_is(scales, 3, " [E, N, K/gs]"));
  SHIMKIT_RETURN_IF_ERROR(rank_is(biases, 3, " [E, N, K/gs]"));
  SHIMKIT_RETURN_IF_ERROR(rank_is(indices, 1, " [P]"));
  const int64_t pairs = x.size(0), k = x.size(1), experts = w.size(0), n = w.size(1);
  if (w.size(2) != k / 2) {
    return invalid("K_packed=" + std::to_string(w.size(2)) + " != K/2=" + std::to_string(k / 2));
  }
  if (indices.size(0) != pairs) {
    return invalid("expert_indices size " + std::to_string(indices.size(0)) + " != P=" + std::to_string(pairs));
  }
  if (x.code != float32_code() && x.code != bfloat16_code()) {
    return invalid("Unsupported dtype " + dtype_text(x.code) + " of x (" + kFile + " has float32 and bfloat16 kernels)");
  }
  SHIMKIT_RETURN_IF_ERROR(require_dtype(w, {uint8_code()}, "two 4-bit values per byte"));
  if (k % 2 != 0 || k % group_size != 0) {
    return invalid("x's K = " + std::to_string(k) + " is not a multiple of 2 and of group_size " +
                   std::to_string(group_size) + " (" + kFile + " steps experts by K / group_size groups per row)");
  }
  const int64_t groups = k / group_size;
  for (const Arg* params : {&scales, &biases}) {
    if (params->size(0) != experts || params->size(1) != n || params->size(2) != groups) {
      return invalid(params->name + " must be [E, N, K / group_size] = " + format_shape({experts, n, groups}) +
                     ", got " + params->describe());
    }
    SHIMKIT_RETURN_IF_ERROR(require_bound_as(*params, x, kFile));
  }
  SHIMKIT_RETURN_IF_ERROR(require_dtype(indices, {int32_code()}, "the Metal kernel reads the indices as uint32"));
  SHIMKIT_RETURN_IF_ERROR(read_densely(x, "a dense [P, K] buffer", &x));
  SHIMKIT_RETURN_IF_ERROR(read_densely(w, "a dense [E, N, K / 2] buffer", &w));
  SHIMKIT_RETURN_IF_ERROR(read_densely(scales, "a dense [E, N, K / group_size] buffer", &scales));
  SHIMKIT_RETURN_IF_ERROR(read_densely(biases, "a dense [E, N, K / group_size] buffer", &biases));
  SHIMKIT_RETURN_IF_ERROR(read_densely(indices, "P dense uint32", &indices));
  const auto* index_data = static_cast<const int32_t*>(indices.view.data);
  for (int64_t i = 0; i < pairs; ++i) {
    if (index_data[i] < 0 || index_data[i] >= experts) {
      return invalid("expert_indices[" + std::to_string(i) + "] = " + std::to_string(index_data[i]) +
                     " is not an expert index in [0, " + std::to_string(experts) + ")");
    }
  }

  if (pairs == 0) {  // aoti_torch_mps_malloc(0) answers a null pointer, which no buffer is registered for
    return Status::internal("allocate_and_register_mtl_buffer: aoti_torch_mps_malloc did not register buffer in map "
                            "(ops/common.mm:35-38: no pairs make a 0-byte output)");
  }
  if (n > kResultsPerSimdgroup && n < kNumSimdgroups * kResultsPerSimdgroup) {
    note_divergence(kSymbol,
                    "for 4 < N < 8 the small-N path accumulates rows 4..N-1 into simdgroup 0's 4-element result[], "
                    "past its end, and races simdgroup 1's writes of those rows (op_gather_qmv.mm:270-300): undefined",
                    "N = " + std::to_string(n));
  }
  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(x, {pairs, n}, x.code, "output", &output));
  // The pairs grouped by expert: each expert's weights are dequantized once, element by element as the kernel
  // dequantizes them (scale * q + bias in float32), and its pairs' rows multiplied in one product.
  std::vector<std::vector<int64_t>> pairs_of(static_cast<std::size_t>(experts));
  for (int64_t i = 0; i < pairs; ++i) pairs_of[static_cast<std::size_t>(index_data[i])].push_back(i);
  const auto* packed = static_cast<const uint8_t*>(w.view.data);
  std::vector<float> weights(static_cast<std::size_t>(n * k)), y(static_cast<std::size_t>(pairs * n));
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int64_t>& chosen = pairs_of[static_cast<std::size_t>(e)];
    if (chosen.empty()) continue;
    parallel_for(n, 2.0 * static_cast<double>(k), [&](int64_t first_row, int64_t last_row) {
      for (int64_t j = first_row; j < last_row; ++j) {
        const int64_t row = e * n + j;
        for (int64_t group = 0; group < groups; ++group) {
          const int64_t g = row * groups + group;
          float values[16];  // a group's 16 possible weights
          for (int code = 0; code < 16; ++code) {
            values[code] = scales.load(g) * static_cast<float>(code) + biases.load(g);
          }
          unpack_nibbles(packed + row * (k / 2) + group * (group_size / 2), group_size / 2, values,
                         weights.data() + j * k + group * group_size);
        }
      }
    });
    const int64_t rows = static_cast<int64_t>(chosen.size());
    std::vector<float> gathered(static_cast<std::size_t>(rows * k)), products(static_cast<std::size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < k; ++p) gathered[static_cast<std::size_t>(r * k + p)] = x.load(chosen[r] * k + p);
    }
    matrix_product(1, rows, k, n, MatrixOperand{gathered.data(), DType::kFloat32, 0, k, 1},
                   MatrixOperand{weights.data(), DType::kFloat32, 0, 1, k}, products.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(products.begin() + r * n, products.begin() + (r + 1) * n, y.begin() + chosen[r] * n);
    }
  }
  store_dense(output.arg, y);
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
