#include "addmm_plan.h"

#include <string>

namespace shimkit {
namespace addmm {

const char* feed_kind_name(FeedKind kind) {
  switch (kind) {
    case FeedKind::kDirect:
      return "direct";
    case FeedKind::kTransposed:
      return "transposed";
    case FeedKind::kPacked:
      return "packed";
  }
  return "unknown";
}

namespace {

Status invalid(const std::string& message) { return Status::invalid_argument(message); }

std::string rank_text(const TensorView& view) {
  return std::to_string(view.dim()) + "-D " + view.describe();
}

Feed feed_for(const TensorView& view) {
  TensorView reduced = unbroadcast(view);
  switch (classify_layout(reduced)) {
    case Layout::kContiguous:
      return {FeedKind::kDirect, reduced.sizes};
    case Layout::kTransposed:
      return {FeedKind::kTransposed, {reduced.sizes[1], reduced.sizes[0]}};
    case Layout::kBroadcast:  // unbroadcast() removed every 0-stride dimension of size > 1
    case Layout::kStrided:
      break;
  }
  return {FeedKind::kPacked, reduced.sizes};
}

void add_feed(CacheKey& key, const Feed& feed) {
  key.add(static_cast<int64_t>(feed.kind)).add_shape(feed.shape);
}

// self aligned to the right against [m, n]; missing and size-1 dimensions get stride 0.
Status expand_self(const TensorView& self, int64_t m, int64_t n, TensorView* expanded) {
  const int64_t target[2] = {m, n};
  *expanded = self;
  expanded->sizes = {m, n};
  expanded->strides = {0, 0};
  for (int64_t t = 0; t < 2; ++t) {
    int64_t s = t - (2 - self.dim());
    if (s < 0) continue;
    if (self.sizes[s] == target[t]) {
      // A size-1 dimension that stays size 1 keeps its stride; it is never stepped over.
      expanded->strides[t] = self.strides[s];
    } else if (self.sizes[s] != 1) {
      return invalid("self of shape " + format_shape(self.sizes) +
                     " cannot be broadcast to the output shape " + format_shape({m, n}));
    }
  }
  return Status::ok();
}

Status validate(const Operands& ops, int64_t* m, int64_t* k, int64_t* n) {
  SHIMKIT_RETURN_IF_ERROR(validate_view(ops.out, "out"));
  SHIMKIT_RETURN_IF_ERROR(validate_view(ops.self, "self"));
  SHIMKIT_RETURN_IF_ERROR(validate_view(ops.mat1, "mat1"));
  SHIMKIT_RETURN_IF_ERROR(validate_view(ops.mat2, "mat2"));
  if (ops.mat1.dim() != 2) return invalid("mat1 must be a matrix (2-D), got " + rank_text(ops.mat1));
  if (ops.mat2.dim() != 2) return invalid("mat2 must be a matrix (2-D), got " + rank_text(ops.mat2));
  if (ops.out.dim() != 2) return invalid("out must be a matrix (2-D), got " + rank_text(ops.out));
  if (ops.self.dim() > 2) {
    return invalid("self must have at most 2 dimensions, got " + rank_text(ops.self));
  }
  const TensorView* others[] = {&ops.mat2, &ops.self, &ops.out};
  const char* other_names[] = {"mat2", "self", "out"};
  for (int i = 0; i < 3; ++i) {
    if (others[i]->dtype != ops.mat1.dtype) {
      return invalid(std::string("dtype mismatch: ") + other_names[i] + " is " +
                     dtype_name(others[i]->dtype) + " but mat1 is " + dtype_name(ops.mat1.dtype) +
                     " (self, mat1, mat2 and out must share one dtype)");
    }
    if (others[i]->device != ops.mat1.device) {
      return invalid(std::string("device mismatch: ") + other_names[i] + " is on " +
                     device_name(others[i]->device) + " but mat1 is on " +
                     device_name(ops.mat1.device));
    }
  }
  *m = ops.mat1.sizes[0];
  *k = ops.mat1.sizes[1];
  *n = ops.mat2.sizes[1];
  if (ops.mat2.sizes[0] != *k) {
    return invalid("mat1 and mat2 shapes cannot be multiplied (" + std::to_string(*m) + "x" +
                   std::to_string(*k) + " and " + std::to_string(ops.mat2.sizes[0]) + "x" +
                   std::to_string(*n) + ")");
  }
  if (ops.out.sizes[0] != *m || ops.out.sizes[1] != *n) {
    return invalid("out has shape " + format_shape(ops.out.sizes) + " but mat1 " +
                   format_shape(ops.mat1.sizes) + " @ mat2 " + format_shape(ops.mat2.sizes) +
                   " gives " + format_shape({*m, *n}));
  }
  if (classify_layout(ops.out) == Layout::kBroadcast) {
    return invalid("out is broadcast (" + ops.out.describe() +
                   "): several output elements would share one memory location");
  }
  return Status::ok();
}

}  // namespace

Status make_plan(const Operands& ops, double beta, double alpha, Plan* plan) {
  Plan p;
  Status status = validate(ops, &p.m, &p.k, &p.n);
  if (status.is_ok()) status = expand_self(ops.self, p.m, p.n, &p.self_expanded);
  if (!status.is_ok()) return status.with_context("addmm");

  p.dtype = ops.mat1.dtype;
  p.output_empty = p.m == 0 || p.n == 0;
  // Whether a term is ignored follows the documented contract on the value given; its coefficient is
  // what the value rounds to in float32, the type every kernel computes in (for the 16-bit types too).
  // torch itself disagrees with itself for a beta that is non-zero but rounds to 0: its k == 0 path
  // propagates NaN from self and its gemm path does not. shimkit takes the first.
  p.uses_self = !p.output_empty && beta != 0.0;
  p.uses_product = !p.output_empty && alpha != 0.0 && p.k > 0;
  p.beta = static_cast<float>(beta);
  p.alpha = static_cast<float>(alpha);

  p.self_layout = classify_layout(p.self_expanded);
  p.mat1_layout = classify_layout(ops.mat1);
  p.mat2_layout = classify_layout(ops.mat2);
  p.out_layout = classify_layout(ops.out);
  p.self_feed = feed_for(p.self_expanded);
  p.mat1_feed = feed_for(ops.mat1);
  p.mat2_feed = feed_for(ops.mat2);
  p.out_feed = feed_for(ops.out);

  // Only what the graph builder reads goes in: an unused operand's layout, or beta when self is
  // ignored, must not split the cache, and everything used must.
  CacheKey key("addmm");
  key.add(static_cast<int64_t>(p.dtype)).add(p.m).add(p.n);
  key.add_bool(p.uses_self).add_bool(p.uses_product);
  if (p.uses_self) {
    key.add_double(p.beta);
    add_feed(key, p.self_feed);
  }
  if (p.uses_product) {
    key.add_double(p.alpha).add(p.k);
    add_feed(key, p.mat1_feed);
    add_feed(key, p.mat2_feed);
  }
  add_feed(key, p.out_feed);
  p.cache_key = std::move(key);

  *plan = std::move(p);
  return Status::ok();
}

}  // namespace addmm
}  // namespace shimkit
