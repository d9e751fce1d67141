// Stands in for the Metal runtime's op_sdpa.mm:
// aoti_torch_mps__scaled_dot_product_attention_math_for_mps and its _v2 (which adds enable_gqa),
// ATen's math attention softmax(scale * q k^T + mask) v for [batch, heads, seq, head_dim] tensors.
// Returns (output, attention weights) as two new contiguous tensors of query's dtype; scores,
// softmax and the weighted sum run in float32 and each result is rounded once.
//
// As ATen: is_causal keeps key j for query i when j <= i (top-left aligned); a row whose every key
// is masked out gets zero weights and a zero output (ATen's safe softmax); a key/value batch or head
// dim of size 1 broadcasts; with enable_gqa, query head h reads key/value head h / (Hq / Hkv).
//
// Rejected like upstream: dropout (dropout_p != 0 or a dropout_mask), dtypes other than float32 and
// bfloat16, a head_dim other than 64, 96, 128 or 256 (upstream has kernels for those only), a value
// head_dim different from query's, a head_dim stride other than 1, and a mask not of query's dtype
// (upstream reads the mask as query's element type, so a bool mask would be misread there). Rejected
// like ATen: a mask together with is_causal, shapes that do not broadcast.
//
// Differences from upstream, which follow ATen here: upstream aligns is_causal bottom-right when
// query and key lengths differ, skips keys whose mask value is <= -1e9 (a row masked only by such
// finite values is zero there and a softmax over them in ATen) and so never lets NaN or inf of a
// masked key reach the row, broadcasts a mask over batch and heads as one flattened dim (wrong for a
// per-batch mask shared by heads), applies GQA to the v1 symbol too, and never writes the attention
// weights it returns.
#include <algorithm>
#include <cmath>

#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

// Offsets of a (possibly broadcast) operand: index 0 along dims of size 1.
int64_t pick(const Arg& arg, int64_t dim, int64_t index) { return arg.size(dim) == 1 ? 0 : index * arg.stride(dim); }

Status check_qkv(const Arg& query, const Arg& key, const Arg& value, bool enable_gqa) {
  for (const Arg* arg : {&query, &key, &value}) {
    SHIMKIT_RETURN_IF_ERROR(require_rank(*arg, 4, "([batch, heads, seq, head_dim])"));
  }
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(query));
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(key, query));
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(value, query));
  const int64_t head_dim = query.size(3);
  if (head_dim != 64 && head_dim != 96 && head_dim != 128 && head_dim != 256) {
    return invalid("query has head_dim " + std::to_string(head_dim) +
                   "; the Metal runtime has kernels for head_dim 64, 96, 128 and 256 only");
  }
  if (key.size(3) != head_dim) {
    return invalid("key has head_dim " + std::to_string(key.size(3)) + " but query has " + std::to_string(head_dim));
  }
  if (value.size(3) != head_dim) {
    return invalid("value has head_dim " + std::to_string(value.size(3)) + " but query has " +
                   std::to_string(head_dim) + " (the Metal runtime's kernels take equal head dims only)");
  }
  for (const Arg* arg : {&query, &key, &value}) {
    if (arg->stride(3) != 1) {
      return invalid(arg->name + " must have a unit stride along head_dim (the Metal runtime's kernel reads it "
                     "densely), got " + arg->describe());
    }
  }
  if (value.size(2) != key.size(2)) {
    return invalid("value has " + std::to_string(value.size(2)) + " positions but key has " +
                   std::to_string(key.size(2)));
  }
  const int64_t batch = query.size(0), heads = query.size(1);
  for (const Arg* arg : {&key, &value}) {
    if (arg->size(0) != batch && arg->size(0) != 1) {
      return invalid(arg->name + " has batch " + std::to_string(arg->size(0)) + " but query has " +
                     std::to_string(batch));
    }
  }
  if (key.size(1) != value.size(1)) {
    return invalid("value has " + std::to_string(value.size(1)) + " heads but key has " + std::to_string(key.size(1)));
  }
  const int64_t kv_heads = key.size(1);
  if (kv_heads != heads && kv_heads != 1) {
    if (!enable_gqa) {
      return invalid("key has " + std::to_string(kv_heads) + " heads but query has " + std::to_string(heads) +
                     "; grouped-query attention needs enable_gqa (the _v2 symbol)");
    }
    if (kv_heads == 0 || heads % kv_heads != 0) {
      return invalid("query's " + std::to_string(heads) + " heads are not a multiple of key's " +
                     std::to_string(kv_heads) + " (enable_gqa)");
    }
  }
  return Status::ok();
}

Status check_mask(const Arg& mask, const Arg& query, int64_t kv_length) {
  SHIMKIT_RETURN_IF_ERROR(require_dtype(
      mask, {query.code}, "the Metal runtime reads the mask as query's element type; ATen's front end turns a "
      "boolean mask into one before this op"));
  const int64_t target[4] = {query.size(0), query.size(1), query.size(2), kv_length};
  if (mask.dim() > 4) return invalid("attn_mask has more than 4 dims: " + mask.describe());
  for (int64_t d = 0; d < mask.dim(); ++d) {
    const int64_t size = mask.size(d), want = target[4 - mask.dim() + d];
    if (size != want && size != 1) {
      return invalid("attn_mask of shape " + format_shape(mask.view.sizes) + " does not broadcast to " +
                     format_shape({target[0], target[1], target[2], target[3]}));
    }
  }
  return Status::ok();
}

Status sdpa(AtenTensorHandle query_handle, AtenTensorHandle key_handle, AtenTensorHandle value_handle,
            AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal, AtenTensorHandle* dropout_mask,
            double* scale, bool enable_gqa, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  if (ret0 == nullptr || ret1 == nullptr) return invalid("ret0 and ret1 must not be null");
  if (dropout_p != 0.0) {
    return unsupported("dropout_p=" + std::to_string(dropout_p) + " is not supported (the Metal runtime has no dropout)");
  }
  if (dropout_mask != nullptr && *dropout_mask != nullptr) {
    return unsupported("dropout_mask is not supported (the Metal runtime has no dropout)");
  }
  Arg query, key, value, mask;
  bool has_mask = false;
  SHIMKIT_RETURN_IF_ERROR(read_arg(query_handle, "query", &query));
  SHIMKIT_RETURN_IF_ERROR(read_arg(key_handle, "key", &key));
  SHIMKIT_RETURN_IF_ERROR(read_arg(value_handle, "value", &value));
  SHIMKIT_RETURN_IF_ERROR(read_optional_arg(attn_mask, "attn_mask", &mask, &has_mask));
  SHIMKIT_RETURN_IF_ERROR(check_qkv(query, key, value, enable_gqa));
  const int64_t batch = query.size(0), heads = query.size(1), q_length = query.size(2), head_dim = query.size(3);
  const int64_t kv_length = key.size(2);
  if (has_mask) {
    if (is_causal) return invalid("attn_mask must not be given with is_causal (ATen rejects the pair)");
    SHIMKIT_RETURN_IF_ERROR(check_mask(mask, query, kv_length));
  }
  // ATen scales q and k by sqrt(scale) each; in float32 that differs from one multiply by rounding only.
  const float factor = scale != nullptr ? static_cast<float>(*scale)
                                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const int64_t group = key.size(1) == heads ? 1 : heads / key.size(1);  // heads per key head (1: broadcast)

  Result output, weights;
  SHIMKIT_RETURN_IF_ERROR(allocate(query, {batch, heads, q_length, head_dim}, query.code, "output", &output));
  SHIMKIT_RETURN_IF_ERROR(allocate(query, {batch, heads, q_length, kv_length}, query.code, "attn_weight", &weights));

  std::vector<float> q(static_cast<std::size_t>(head_dim)), scores(static_cast<std::size_t>(kv_length));
  std::vector<float> acc(static_cast<std::size_t>(head_dim));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_head = key.size(1) == 1 ? 0 : h / group;
      const int64_t k_base = pick(key, 0, b) + kv_head * key.stride(1);
      const int64_t v_base = pick(value, 0, b) + kv_head * value.stride(1);
      for (int64_t i = 0; i < q_length; ++i) {
        const int64_t q_base = b * query.stride(0) + h * query.stride(1) + i * query.stride(2);
        for (int64_t d = 0; d < head_dim; ++d) q[static_cast<std::size_t>(d)] = query.load(q_base + d);
        int64_t mask_base = 0;
        if (has_mask) {
          const int64_t index[4] = {b, h, i, 0};
          for (int64_t d = 0; d < mask.dim() - 1; ++d) mask_base += pick(mask, d, index[4 - mask.dim() + d]);
        }
        // Scores, then ATen's safe softmax: NaN anywhere makes the row NaN, all -inf makes it zero.
        float top = -INFINITY;
        bool any_nan = false;
        for (int64_t j = 0; j < kv_length; ++j) {
          // Every score is computed and masks are added, as ATen does: NaN or +inf in a masked key still
          // turns the row into NaN there.
          const int64_t k_row = k_base + j * key.stride(2);
          float dot = 0.0f;
          for (int64_t d = 0; d < head_dim; ++d) dot += q[static_cast<std::size_t>(d)] * key.load(k_row + d);
          float score = dot * factor;
          if (is_causal && j > i) score += -INFINITY;
          if (has_mask) score += mask.load(mask_base + (mask.dim() > 0 ? pick(mask, mask.dim() - 1, j) : 0));
          scores[static_cast<std::size_t>(j)] = score;
          any_nan = any_nan || std::isnan(score);
          if (score > top) top = score;
        }
        float total = 0.0f;
        for (int64_t j = 0; j < kv_length; ++j) {
          float& s = scores[static_cast<std::size_t>(j)];
          if (any_nan) {
            s = NAN;
          } else if (top == -INFINITY) {
            s = 0.0f;  // the whole row is masked out
          } else {
            s = std::exp(s - top);
          }
          total += s;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        const int64_t w_base = ((b * heads + h) * q_length + i) * kv_length;
        for (int64_t j = 0; j < kv_length; ++j) {
          float& s = scores[static_cast<std::size_t>(j)];
          if (total != 0.0f) s /= total;  // 0: the row is masked out and stays zero
          weights.arg.store(w_base + j, s);
          const int64_t v_row = v_base + j * value.stride(2);
          for (int64_t d = 0; d < head_dim; ++d) acc[static_cast<std::size_t>(d)] += s * value.load(v_row + d);
        }
        const int64_t o_base = ((b * heads + h) * q_length + i) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) output.arg.store(o_base + d, acc[static_cast<std::size_t>(d)]);
      }
    }
  }
  return hand_over(&output, ret0, &weights, ret1);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_mask,
    double dropout_p, int32_t is_causal, AtenTensorHandle* dropout_mask, double* scale, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps__scaled_dot_product_attention_math_for_mps", [&] {
    return shimkit::metal_fallbacks::sdpa(query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale,
                                          /*enable_gqa=*/false, ret0, ret1);
  });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_mask,
    double dropout_p, int32_t is_causal, AtenTensorHandle* dropout_mask, double* scale, int32_t enable_gqa,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", [&] {
    return shimkit::metal_fallbacks::sdpa(query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale,
                                          enable_gqa != 0, ret0, ret1);
  });
}

}  // extern "C"
