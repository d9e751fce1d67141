// addmm's portable plan: out = beta * self + alpha * (mat1 @ mat2).
//
// Everything a device implementation needs to decide is decided here, once, and tested on any
// machine: argument validation, the output shape, how each operand lies in memory and how a graph
// device must feed it, and the graph-cache key. Device code (the reference loop, the MPSGraph
// builder) only executes a plan.
#pragma once

#include <cstdint>
#include <vector>

#include "shimkit/cache_key.h"
#include "shimkit/layout.h"
#include "shimkit/status.h"
#include "shimkit/tensor_view.h"

namespace shimkit {
namespace addmm {

struct Operands {
  TensorView out;
  TensorView self;
  TensorView mat1;
  TensorView mat2;
};

// How a graph device (which reads a buffer as dense row-major from its first element) feeds one
// operand.
enum class FeedKind : int32_t {
  kDirect = 0,      // the buffer holds `shape` densely, row-major
  kTransposed = 1,  // the buffer holds `shape` densely; the operand is its transpose
  kPacked = 2,      // no dense reading exists: pack into (or, for out, unpack from) a dense `shape`
};

const char* feed_kind_name(FeedKind kind);

struct Feed {
  FeedKind kind = FeedKind::kDirect;
  // The placeholder shape, after dropping broadcast (0-stride) dimensions: the graph broadcasts it
  // back to the operand's logical shape. Always rank 2.
  std::vector<int64_t> shape;
  bool operator==(const Feed& other) const { return kind == other.kind && shape == other.shape; }
};

struct Plan {
  DType dtype = DType::kFloat32;
  int64_t m = 0, k = 0, n = 0;
  // As rounded to float32, the type every kernel computes in. Stored as float, not as a double holding
  // a float: gcc 12's SLP vectorizer drops the rounding of a (double)(float) pair (-O2 and up).
  float beta = 1.0f, alpha = 1.0f;

  // beta == 0 ignores self (its NaN and inf do not propagate); alpha == 0 or k == 0 makes the
  // product exactly zero, so it is not computed (NaN and inf in mat1/mat2 do not propagate).
  bool uses_self = true;
  bool uses_product = true;
  // m == 0 or n == 0: out has no elements and nothing runs.
  bool output_empty = false;

  // self broadcast to [m, n]: its sizes are [m, n], strides 0 along broadcast dimensions.
  TensorView self_expanded;

  Layout self_layout = Layout::kContiguous;  // of self_expanded
  Layout mat1_layout = Layout::kContiguous;
  Layout mat2_layout = Layout::kContiguous;
  Layout out_layout = Layout::kContiguous;

  Feed self_feed, mat1_feed, mat2_feed, out_feed;

  // Names the graph a graph device builds for this plan: written from exactly the fields the
  // builder reads (dtype, m, k, n, uses_*, beta/alpha where used, the feeds of the operands used).
  CacheKey cache_key;
};

// Validates the operands and fills `plan`. Errors name the argument ("addmm: mat2 ...").
Status make_plan(const Operands& operands, double beta, double alpha, Plan* plan);

// The reference implementation for any CPU-addressable memory, accumulating in float32.
// Reads every input before writing out, so out may alias any input.
Status run_reference(const Plan& plan, const Operands& operands);

}  // namespace addmm
}  // namespace shimkit
