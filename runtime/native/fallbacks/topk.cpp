// Stands in for the Metal runtime's op_topk.mm (pytorch/executorch cff6f4d): aoti_torch_mps_topk returns the k
// largest (or smallest) elements along `dim` and their int64 indices, as two new contiguous tensors, computed as
// that file computes them where that is not what ATen computes (each noted as a divergence, so the verdict says so):
// - self is read through sizes() alone, as a dense buffer of its sizes from its data pointer (:107-110, :131, :141,
//   :209), whatever its strides; one spanning fewer elements than that read is refused, never read past its end;
// - largest=false ranks the negated elements and negates the k it picks back (:185-191): the values are the
//   elements bit for bit, but the order is the largest's order of the negated elements, so NaN signs flip (below).
//
// MPSGraph's topK order is not documented. Assumed here: it ranks as MPSGraph's sort does, the two running on one
// kernel (PyTorch's MPS topk fails inside MPSNDArraySort: pytorch/pytorch#154890), and that sort was seen to put a NaN
// with its sign bit set below every number (pytorch/pytorch#116567); so a NaN with the sign bit clear ranks above
// +inf, one with it set below -inf, numbers compare as IEEE values (-0.0 == 0.0), and equal values (NaNs of one sign
// among them) go lower index first (nothing public says; an assumption too).
// Through the negation, largest=false then puts an input NaN with the sign bit clear last (as ATen does) and one with
// it set first (ATen: last), equal values again lower index first. ATen ranks every NaN above every number, so a
// row with a NaN of the sign bit set is where the two differ. The NaNs the stand-in's own kernels compute carry the
// x86 sign (0/0 gives the bit set), which a GPU's need not.
//
// Refused as upstream refuses, with its messages: a dim out of range, and so every dim of a 0-d self (:51-58); k
// larger than the dim (:60-64); dtypes other than float32 and bfloat16 (:71-80); an empty result, whose 0-byte buffer
// aoti_torch_mps_malloc hands back as an unregistered null pointer that allocate_mtl_buffer then fails to look up
// (:96-104, shim_mps.mm:329-333, common.mm:35-38). Refused here: k < 0, which only k > dim_size is checked against
// and whose output size wraps as a size_t there (:82-101). `sorted` is accepted and ignored, as upstream does (:11).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

constexpr const char* kSymbol = "aoti_torch_mps_topk";
constexpr const char* kFile = "op_topk.mm";

// +1 for a NaN with the sign bit clear, -1 for one with it set, 0 for a number: the assumed order's tiers.
int nan_tier(float value) { return std::isnan(value) ? (std::signbit(value) ? -1 : 1) : 0; }

// `a` ranks strictly above `b` in MPSGraph's topK as assumed above.
bool above_in_mpsgraph(float a, float b) {
  const int tier_a = nan_tier(a), tier_b = nan_tier(b);
  if (tier_a != tier_b) return tier_a > tier_b;
  return tier_a == 0 && a > b;
}

// `a` comes before `b` in ATen's topk: every NaN above every number.
bool before_in_aten(float a, float b, bool largest) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan || b_nan) return largest ? a_nan && !b_nan : b_nan && !a_nan;
  return largest ? a > b : a < b;
}

bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

struct Ranked {
  float key;  // what MPSGraph's topK ranks: the element, or its negation for largest=false
  float value;
  int64_t index;
};

Status topk(AtenTensorHandle self_handle, int64_t k, int64_t dim, bool largest, AtenTensorHandle* ret0,
            AtenTensorHandle* ret1) {
  if (self_handle == nullptr || ret0 == nullptr || ret1 == nullptr) return invalid("null tensor handles");
  Arg self;
  SHIMKIT_RETURN_IF_ERROR(read_arg(self_handle, "self", &self));
  const int64_t rank = self.dim();
  const int64_t given_dim = dim;
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) {
    return invalid("invalid dim " + std::to_string(given_dim) + " for self of rank " + std::to_string(rank) +
                   (rank == 0 ? " (a 0-d self has no dim to take)" : ""));
  }
  const int64_t length = self.size(dim);
  if (k > length) return invalid("k=" + std::to_string(k) + " > dim_size=" + std::to_string(length));
  if (self.code != float32_code() && self.code != bfloat16_code()) {
    return invalid("Unsupported dtype " + std::to_string(self.code) + " (" + dtype_text(self.code) + "; " + kFile +
                   " has float32 and bfloat16 graphs)");
  }
  if (k < 0) {
    return invalid("k=" + std::to_string(k) + " is negative: " + kFile +
                   " checks only k > dim_size and would size its output buffers with it, wrapped as a size_t");
  }
  std::vector<int64_t> out_sizes = self.view.sizes;
  out_sizes[static_cast<std::size_t>(dim)] = k;
  if (std::find(out_sizes.begin(), out_sizes.end(), 0) != out_sizes.end()) {
    return invalid("Failed to look up allocated Metal buffer: the result " + format_shape(out_sizes) +
                   " is empty, and aoti_torch_mps_malloc hands a 0-byte buffer back as a null pointer it never "
                   "registered (shim_mps.mm:329-333, common.mm:35-38)");
  }
  Arg dense;
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kSymbol, kFile, "", self, contiguous_strides(self.view.sizes),
                                           "a dense buffer of its sizes", &dense));

  Result values, indices;
  SHIMKIT_RETURN_IF_ERROR(allocate(self, out_sizes, self.code, "values", &values));
  SHIMKIT_RETURN_IF_ERROR(allocate(self, out_sizes, int64_code(), "indices", &indices));
  const std::size_t element_size = self.code == float32_code() ? 4 : 2;
  const auto* self_bytes = static_cast<const unsigned char*>(dense.view.data);
  auto* values_bytes = static_cast<unsigned char*>(values.arg.view.data);
  auto* index_data = static_cast<int64_t*>(indices.arg.view.data);

  std::vector<int64_t> row_sizes = self.view.sizes;
  row_sizes[static_cast<std::size_t>(dim)] = 1;
  const int64_t self_step = dense.stride(dim);
  const int64_t out_step = values.arg.stride(dim);
  std::vector<Ranked> row(static_cast<std::size_t>(length));
  std::vector<float> aten(static_cast<std::size_t>(length));
  auto mpsgraph_first = [](const Ranked& a, const Ranked& b) {
    if (above_in_mpsgraph(a.key, b.key)) return true;
    return !above_in_mpsgraph(b.key, a.key) && a.index < b.index;
  };
  bool noted = false;
  for_each_index(row_sizes, [&](int64_t, const std::vector<int64_t>& at) {
    const int64_t base = offset_of(at, dense.view.strides);
    for (int64_t i = 0; i < length; ++i) {
      const float value = dense.load(base + i * self_step);
      // IEEE negation flips the sign bit of a NaN too, as MPSGraph's negative is assumed to.
      row[static_cast<std::size_t>(i)] = {largest ? value : -value, value, i};
      aten[static_cast<std::size_t>(i)] = value;
    }
    std::partial_sort(row.begin(), row.begin() + k, row.end(), mpsgraph_first);
    const int64_t out_base = offset_of(at, values.arg.view.strides);
    for (int64_t i = 0; i < k; ++i) {
      const Ranked& picked = row[static_cast<std::size_t>(i)];
      // Negated twice for largest=false: the element's own bits.
      std::memcpy(values_bytes + (out_base + i * out_step) * element_size,
                  self_bytes + (base + picked.index * self_step) * element_size, element_size);
      index_data[out_base + i * out_step] = picked.index;
    }
    if (noted) return;
    std::partial_sort(aten.begin(), aten.begin() + k, aten.end(),
                      [largest](float a, float b) { return before_in_aten(a, b, largest); });
    for (int64_t i = 0; i < k && !noted; ++i) {
      if (same_value(row[static_cast<std::size_t>(i)].value, aten[static_cast<std::size_t>(i)])) continue;
      note_divergence(kSymbol, std::string("ranks a NaN by its sign bit, one with the bit set below every number ") +
                                   "(assumed of MPSGraph's topK: pytorch/pytorch#116567), and for largest=false the " +
                                   "negated elements (op_topk.mm:185-191), where ATen ranks every NaN above every number",
                      "self " + self.layout() + ", the row at " + format_shape(at) + ", largest=" +
                          (largest ? "true" : "false"));
      noted = true;
    }
  });
  return hand_over(&values, ret0, &indices, ret1);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
                                                     int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  (void)sorted;
  return shimkit::metal_fallbacks::run("aoti_torch_mps_topk", [&] {
    return shimkit::metal_fallbacks::topk(self, k, dim, largest != 0, ret0, ret1);
  });
}

}  // extern "C"
