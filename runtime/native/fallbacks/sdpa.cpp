// Stands in for the Metal runtime's op_sdpa.mm (pytorch/executorch cff6f4d; line numbers are that file's):
// aoti_torch_mps__scaled_dot_product_attention_math_for_mps and its _v2 (which adds enable_gqa), attention
// softmax(scale * q k^T + mask) v for [batch, heads, seq, head_dim] tensors, computed as upstream's sdpa_vector
// kernel computes it (:31-199): for each query, 32 simdgroups each take every 32nd key and keep a running float32
// max, sum and output, combined at the end (exp where the kernel has metal::fast::exp, whose error Apple bounds
// but does not specify); the output is rounded once to query's dtype. Returns (output, attention weights) as two
// new contiguous tensors of query's dtype.
//
// What upstream computes, where it is not what ATen computes (each noted as a divergence, so the verdict says so):
// - a key is used only where its mask value is > -1e9 (NaN included: never) and, with is_causal, only where
//   j <= N - Q + i in 32-bit unsigned arithmetic (:124-130): causal attention is aligned bottom-right when the query
//   and key lengths differ (ATen: top-left), and NaN or infinities of a masked key never reach the row;
// - a query none of whose keys is used gets NaN (the combine's exp(-inf - -inf), :180-191), where ATen gives zeros;
// - the mask is addressed by its last three dims alone, the batch and heads flattened into one index times the
//   stride of its third-last dim (:88-103, :586-595): every batch of a per-batch mask [B, 1, Q, N] reads batch 0's;
// - grouped-query attention (query head h reads key head h / (Hq / Hkv), :532) applies to the v1 symbol too, which
//   passes enable_gqa=0 and never reads it (:268-280);
// - the attention weights are allocated and never written (:457-461, :668-691): here they are filled with NaN, so a
//   program that reads them shows it.
// Rejected like upstream, with its reasons: dropout (dropout_p != 0 or a dropout_mask), dtypes other than float32
// and bfloat16, a head_dim other than 64, 96, 128 or 256, a head_dim stride other than 1. Rejected here where
// upstream would read past a buffer or misread one: a value head_dim different from query's, heads that are not a
// multiple of key's, a key or value batch of 1 with a real stride under a larger query batch (upstream indexes it
// by the query's batch), a mask the flattened addressing would read past its end, a mask not of query's dtype (read
// as query's element type there), shapes that do not broadcast. Rejected like ATen: a mask together with is_causal.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "fallback_common.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // the vector type never crosses a call compiled apart from its caller

namespace shimkit {
namespace metal_fallbacks {
namespace {

// Offsets of a (possibly broadcast) operand: index 0 along dims of size 1.
int64_t pick(const Arg& arg, int64_t dim, int64_t index) { return arg.size(dim) == 1 ? 0 : index * arg.stride(dim); }

constexpr const char* kSymbol = "aoti_torch_mps__scaled_dot_product_attention_math_for_mps";

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
  if (kv_heads == 0 || heads % kv_heads != 0) {
    return invalid("query's " + std::to_string(heads) + " heads are not a multiple of key's " +
                   std::to_string(kv_heads) + " (op_sdpa.mm would read keys past the last head)");
  }
  if (kv_heads != heads && kv_heads != 1 && !enable_gqa) {
    note_divergence(kSymbol, "applies grouped-query attention on the v1 symbol, which has no enable_gqa (op_sdpa.mm:"
                             "268-280, :532), where ATen refuses query and key heads that differ",
                    std::to_string(heads) + " query heads, " + std::to_string(kv_heads) + " key heads");
  }
  for (const Arg* arg : {&key, &value}) {
    if (batch > 1 && arg->size(0) == 1 && arg->stride(0) != 0) {
      return invalid(arg->name + " " + arg->describe() + " has batch 1 under query's batch " + std::to_string(batch) +
                     ": op_sdpa.mm indexes it by query's batch (its kernel's batch_idx * strides()[0]) and would read "
                     "it past its end");
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

// How op_sdpa.mm addresses the mask (:586-595 and the kernel's :100-103): its last three dims only, each stride 0
// where that dim has size 1, the batch and heads one flattened index times the third-last dim's stride.
struct MaskAddressing {
  int64_t head = 0, q_seq = 0, kv_seq = 0;

  explicit MaskAddressing(const Arg& mask) {
    const int64_t nd = mask.dim();
    auto stride_of = [&](int64_t from_end) {
      return nd >= from_end && mask.size(nd - from_end) > 1 ? mask.stride(nd - from_end) : 0;
    };
    kv_seq = stride_of(1);
    q_seq = stride_of(2);
    head = stride_of(3);
  }
  int64_t base(int64_t flat_head, int64_t query) const { return flat_head * head + query * q_seq; }
};

Status check_mask_addressing(const char* symbol, const Arg& mask, const MaskAddressing& upstream, int64_t batch,
                             int64_t heads, int64_t q_length, int64_t kv_length) {
  if (batch * heads * q_length * kv_length == 0) return Status::ok();
  const int64_t reach = upstream.base(batch * heads - 1, q_length - 1) + (kv_length - 1) * upstream.kv_seq;
  if (reach >= dense_span(mask)) {
    return invalid("attn_mask " + mask.describe() + " would be read past its end: op_sdpa.mm addresses it by its last "
                   "three dims, batch and heads flattened into one index (element " + std::to_string(reach) +
                   " of " + std::to_string(dense_span(mask)) + ")");
  }
  const int64_t nd = mask.dim();
  for (int64_t b = 1; b < batch; ++b) {  // heads and positions are addressed as ATen does; the batch may not be
    const int64_t aten = nd == 4 ? pick(mask, 0, b) : 0;
    if (upstream.base(b * heads, 0) != aten) {
      note_divergence(symbol, "addresses attn_mask with batch and heads flattened into one index (op_sdpa.mm:88-103, "
                              ":586-595), so batch b reads another batch's mask where ATen broadcasts per dim",
                      "attn_mask " + mask.layout() + " under batch " + std::to_string(batch) + ", " +
                          std::to_string(heads) + " heads");
      break;
    }
  }
  return Status::ok();
}

// The kernel's 32 simdgroups: simdgroup g takes keys g, g + 32, g + 64 ... (:124-160).
constexpr int64_t kSimdgroups = 32;

// Eight floats, which GCC's vector extension lowers to one AVX register or two SSE ones; the products and sums
// on them are those of the scalar code, lane by lane (neither instruction set fuses a multiply and an add).
constexpr int64_t kLanes = 8;
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Mask __attribute__((vector_size(kLanes * sizeof(int32_t))));
inline Lanes load(const float* from) {
  Lanes lanes;
  std::memcpy(&lanes, from, sizeof(lanes));
  return lanes;
}
inline void store(float* to, const Lanes& lanes) { std::memcpy(to, &lanes, sizeof(lanes)); }

// One key head of one batch: its keys and values as float32, transposed to [head_dim, keys] (keys padded to a
// multiple of kSimdgroups with zeros, never used), so that one step of a sum runs across keys and simdgroups.
struct KeyHead {
  int64_t keys = 0, padded = 0;
  std::vector<float> key_t, value_t;
};

// The state of the kernel's simdgroups for one query, simdgroup g in lane g: the running max score, the sum of
// exponentials and the output row ([head_dim, 32]).
struct Simdgroups {
  float max[kSimdgroups], sum[kSimdgroups];
  std::vector<float> out;
};

// What one query of one head computes: `q` is the query already times the scale; `usable[j]` whether key j is used
// (its mask > -1e9 and, with is_causal, inside the causal bound) and `added[j]` what is added to its score (the mask
// value, 0 without one). Each step is the one the kernel makes (and the stand-in made before it ran across keys):
// a score is the float32 sum over head_dim in order; a simdgroup's state advances key by key, in order, from
// exponentials of differences to its running max; the 32 states are combined in simdgroup order. Returns whether
// any key was used. __attribute__((target_clones)) compiles it for AVX2 too (which fuses nothing: no FMA).
__attribute__((target_clones("avx2", "default"))) bool attend(const KeyHead& head, int64_t head_dim, const float* q,
                                                              const unsigned char* usable, const float* added,
                                                              float* scores, Simdgroups* state, float* row) {
  const int64_t keys = head.keys, padded = head.padded;
  for (int64_t j = 0; j < padded; ++j) scores[j] = 0.0f;
  for (int64_t d = 0; d < head_dim; ++d) {
    const float qd = q[d];
    const float* k = head.key_t.data() + d * padded;
    for (int64_t j = 0; j < padded; j += kLanes) {
      const Lanes term = qd * load(k + j);
      store(scores + j, load(scores + j) + term);
    }
  }
  for (int64_t j = 0; j < keys; ++j) scores[j] += added[j];

  float* const max = state->max;
  float* const sum = state->sum;
  float* const out = state->out.data();
  for (int64_t g = 0; g < kSimdgroups; ++g) max[g] = -INFINITY, sum[g] = 0.0f;
  std::fill(out, out + head_dim * kSimdgroups, 0.0f);
  bool any = false;
  float rescale[kSimdgroups], weight[kSimdgroups];
  unsigned char take[kSimdgroups];
  for (int64_t block = 0; block < keys; block += kSimdgroups) {
    bool some = false;
    for (int64_t g = 0; g < kSimdgroups; ++g) {
      const int64_t j = block + g;
      take[g] = j < keys && usable[j];
      rescale[g] = 1.0f, weight[g] = 0.0f;
      if (!take[g]) continue;
      some = true;
      const float score = scores[j];
      const float new_max = std::fmax(max[g], score);  // Metal's max returns the other of a NaN
      rescale[g] = std::exp(max[g] - new_max);
      weight[g] = std::exp(score - new_max);
      max[g] = new_max;
      const float kept = sum[g] * rescale[g];
      sum[g] = kept + weight[g];
    }
    if (!some) continue;
    any = true;
    Lanes scale_by[kSimdgroups / kLanes], weight_of[kSimdgroups / kLanes];
    Mask taken[kSimdgroups / kLanes];
    for (int64_t part = 0; part < kSimdgroups / kLanes; ++part) {
      scale_by[part] = load(rescale + part * kLanes);
      weight_of[part] = load(weight + part * kLanes);
      for (int64_t l = 0; l < kLanes; ++l) taken[part][l] = take[part * kLanes + l] ? -1 : 0;
    }
    for (int64_t d = 0; d < head_dim; ++d) {
      float* o = out + d * kSimdgroups;
      const float* v = head.value_t.data() + d * padded + block;
      for (int64_t part = 0; part < kSimdgroups / kLanes; ++part) {
        const Lanes before = load(o + part * kLanes);
        const Lanes kept = before * scale_by[part];
        const Lanes gained = weight_of[part] * load(v + part * kLanes);
        store(o + part * kLanes, taken[part] ? kept + gained : before);
      }
    }
  }

  float top = -INFINITY;
  for (int64_t g = 0; g < kSimdgroups; ++g) top = std::fmax(top, max[g]);
  float factor[kSimdgroups];
  float total = 0.0f;
  for (int64_t g = 0; g < kSimdgroups; ++g) {
    factor[g] = std::exp(max[g] - top);
    const float share = sum[g] * factor[g];
    total += share;
  }
  const float safe_total = total == 0.0f ? 1e-6f : total;
  for (int64_t d = 0; d < head_dim; ++d) {
    float value = 0.0f;
    for (int64_t g = 0; g < kSimdgroups; ++g) {
      const float share = out[d * kSimdgroups + g] * factor[g];
      value += share;
    }
    row[d] = value / safe_total;
  }
  return any;
}

Status sdpa(const char* symbol, AtenTensorHandle query_handle, AtenTensorHandle key_handle,
            AtenTensorHandle value_handle, AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal,
            AtenTensorHandle* dropout_mask, double* scale, bool enable_gqa, AtenTensorHandle* ret0,
            AtenTensorHandle* ret1) {
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
  MaskAddressing addressing(mask);
  if (has_mask) {
    if (is_causal) return invalid("attn_mask must not be given with is_causal (ATen rejects the pair)");
    SHIMKIT_RETURN_IF_ERROR(check_mask(mask, query, kv_length));
    SHIMKIT_RETURN_IF_ERROR(check_mask_addressing(symbol, mask, addressing, batch, heads, q_length, kv_length));
  }
  if (is_causal && q_length != kv_length && q_length > 0) {
    note_divergence(symbol, "aligns is_causal bottom-right, query i seeing keys up to i + key length - query length "
                            "(op_sdpa.mm:126-130), where ATen aligns it top-left",
                    "query length " + std::to_string(q_length) + ", key length " + std::to_string(kv_length));
  }
  const float factor = scale != nullptr ? static_cast<float>(*scale)
                                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const int64_t group = heads / key.size(1);  // query heads per key head (the kernel's gqa_factor)

  Result output, weights;
  SHIMKIT_RETURN_IF_ERROR(allocate(query, {batch, heads, q_length, head_dim}, query.code, "output", &output));
  SHIMKIT_RETURN_IF_ERROR(allocate(query, {batch, heads, q_length, kv_length}, query.code, "attn_weight", &weights));
  for (int64_t e = 0, count = weights.arg.numel(); e < count; ++e) weights.arg.store(e, NAN);  // never written upstream

  const uint32_t causal_end = static_cast<uint32_t>(kv_length) - static_cast<uint32_t>(q_length);  // wraps as uint
  const int64_t kv_heads = key.size(1);
  std::vector<int64_t> first_empty_row(static_cast<std::size_t>(batch * heads), -1);
  const double work = static_cast<double>(group * q_length) * static_cast<double>(kv_length * head_dim) * 2.0;
  // One item per key head of each batch: the query heads that share it read its keys and values once.
  parallel_for(batch * kv_heads, work, [&](int64_t first_item, int64_t last_item) {
    KeyHead head;
    head.keys = kv_length;
    head.padded = (kv_length + kSimdgroups - 1) / kSimdgroups * kSimdgroups;
    head.key_t.assign(static_cast<std::size_t>(head_dim * head.padded), 0.0f);
    head.value_t.assign(static_cast<std::size_t>(head_dim * head.padded), 0.0f);
    std::vector<float> q(static_cast<std::size_t>(head_dim)), row(static_cast<std::size_t>(head_dim));
    std::vector<float> scores(static_cast<std::size_t>(head.padded)), added(static_cast<std::size_t>(kv_length));
    std::vector<unsigned char> usable(static_cast<std::size_t>(kv_length));
    Simdgroups state;
    state.out.resize(static_cast<std::size_t>(head_dim * kSimdgroups));
    for (int64_t item = first_item; item < last_item; ++item) {
      const int64_t b = item / kv_heads, kv_head = item % kv_heads;
      const int64_t k_base = b * key.stride(0) + kv_head * key.stride(1);
      const int64_t v_base = b * value.stride(0) + kv_head * value.stride(1);
      for (int64_t j = 0; j < kv_length; ++j) {
        for (int64_t d = 0; d < head_dim; ++d) {
          head.key_t[static_cast<std::size_t>(d * head.padded + j)] = key.load(k_base + j * key.stride(2) + d);
          head.value_t[static_cast<std::size_t>(d * head.padded + j)] = value.load(v_base + j * value.stride(2) + d);
        }
      }
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        for (int64_t i = 0; i < q_length; ++i) {
          const int64_t q_base = b * query.stride(0) + h * query.stride(1) + i * query.stride(2);
          for (int64_t d = 0; d < head_dim; ++d) q[static_cast<std::size_t>(d)] = factor * query.load(q_base + d);
          const int64_t mask_base = addressing.base(b * heads + h, i);
          for (int64_t j = 0; j < kv_length; ++j) {
            const float mask_value = has_mask ? mask.load(mask_base + j * addressing.kv_seq) : 0.0f;
            bool valid = !has_mask || mask_value > -1e9f;
            if (is_causal) valid = valid && static_cast<uint32_t>(j) <= causal_end + static_cast<uint32_t>(i);
            usable[static_cast<std::size_t>(j)] = valid;
            added[static_cast<std::size_t>(j)] = mask_value;
          }
          const bool any = attend(head, head_dim, q.data(), usable.data(), added.data(), scores.data(), &state,
                                  row.data());
          int64_t& empty = first_empty_row[static_cast<std::size_t>(b * heads + h)];
          if (!any && empty < 0) empty = i;
          const int64_t o_base = ((b * heads + h) * q_length + i) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) output.arg.store(o_base + d, row[static_cast<std::size_t>(d)]);
        }
      }
    }
  });
  for (int64_t flat = 0; flat < batch * heads; ++flat) {
    const int64_t i = first_empty_row[static_cast<std::size_t>(flat)];
    if (i < 0) continue;
    note_divergence(symbol, "gives NaN for a query none of whose keys it uses (masked at <= -1e9, or causally; "
                            "op_sdpa.mm:124-130, :180-191), where ATen gives zeros or a softmax over the "
                            "finite masked scores",
                    "query " + std::to_string(i) + " of batch " + std::to_string(flat / heads) + ", head " +
                        std::to_string(flat % heads));
    break;
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
    return shimkit::metal_fallbacks::sdpa("aoti_torch_mps__scaled_dot_product_attention_math_for_mps", query, key,
                                          value, attn_mask, dropout_p, is_causal, dropout_mask, scale,
                                          /*enable_gqa=*/false, ret0, ret1);
  });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_mask,
    double dropout_p, int32_t is_causal, AtenTensorHandle* dropout_mask, double* scale, int32_t enable_gqa,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", [&] {
    return shimkit::metal_fallbacks::sdpa("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", query, key,
                                          value, attn_mask, dropout_p, is_causal, dropout_mask, scale,
                                          enable_gqa != 0, ret0, ret1);
  });
}

}  // extern "C"
