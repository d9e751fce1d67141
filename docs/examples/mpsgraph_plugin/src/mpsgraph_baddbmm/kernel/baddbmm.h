// baddbmm on Metal as one MPSGraph: out = beta * self + alpha * (batch1 @ batch2).
//
// Three callers share this header:
//   baddbmm_shim_mps.mm   the c-shim aoti_torch_mps_baddbmm_out, compiled into ExecuTorch's Metal runtime;
//   baddbmm_host.mm       the host module's Metal side (buffers copied from host memory), for tests;
//   baddbmm_bindings.cpp  the host module's Python bindings (plain C++: it sees the portable part only).
// The portable part (plan_baddbmm) validates a call by ATen's rules; the Objective-C++ part (run_baddbmm, in
// baddbmm_graph.mm) builds the graph over MTLBuffers and hands it to the caller to execute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpsgraph_baddbmm {

// c10 ScalarType codes: what aoti_torch_get_dtype and a DLPack-borrowed tensor report.
constexpr int32_t kFloat16 = 5;
constexpr int32_t kFloat32 = 6;
constexpr int32_t kBFloat16 = 15;

// One tensor argument as its caller sees it: element type, sizes and strides (in elements).
struct Operand {
  int32_t dtype = kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// A validated call: [batch, rows, inner] @ [batch, inner, cols] into out [batch, rows, cols]. Each input is fed at
// its feed shape (see feed_shape; self's with leading 1s up to rank 3), which the graph broadcasts where need be.
struct Call {
  int32_t dtype = kFloat32;
  int64_t batch = 0, rows = 0, inner = 0, cols = 0;
  std::vector<int64_t> self_shape, batch1_shape, batch2_shape;
  double beta = 1, alpha = 1;

  bool uses_self() const { return beta != 0; }       // ATen ignores self when beta == 0: its NaN never shows
  bool uses_product() const { return inner != 0; }   // inner == 0: the product is zeros (and there are no bytes)
  int64_t out_numel() const { return batch * rows * cols; }
};

inline int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  return count;
}

inline std::size_t element_size(int32_t dtype) { return dtype == kFloat32 ? 4 : 2; }

inline const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    default: return "an unsupported dtype";
  }
}

inline std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

// The sizes an input's memory holds: an expanded dimension (stride 0, as Inductor hands over a bias it broadcast)
// counts once. The graph broadcasts the input back to its sizes.
inline std::vector<int64_t> feed_shape(const Operand& operand) {
  std::vector<int64_t> shape = operand.sizes;
  if (numel(shape) == 0) return shape;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (operand.strides[i] == 0) shape[i] = 1;
  }
  return shape;
}

// Whether `sizes` with `strides` is dense row-major memory (a dimension of size 1 may have any stride).
inline bool dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (numel(sizes) == 0) return true;  // no element: nothing is read or written
  int64_t expected = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// "" with *call filled in, or what is wrong with the call, naming the argument.
inline std::string plan_baddbmm(const Operand& out, const Operand& self, const Operand& batch1,
                                const Operand& batch2, double beta, double alpha, Call* call) {
  const Operand* operands[] = {&out, &self, &batch1, &batch2};
  const char* names[] = {"out", "self", "batch1", "batch2"};
  for (int i = 0; i < 4; ++i) {
    const int32_t dtype = operands[i]->dtype;
    if (dtype != kFloat32 && dtype != kFloat16 && dtype != kBFloat16) {
      return std::string("baddbmm: ") + names[i] + " has dtype code " + std::to_string(dtype) +
             "; the kernel takes float32, float16 and bfloat16";
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int32_t dtype = operands[i]->dtype;
    if (dtype != batch1.dtype) {
      return std::string("baddbmm: ") + names[i] + " is " + dtype_name(dtype) + " but batch1 is " +
             dtype_name(batch1.dtype) + ": every operand must have one dtype";
    }
    if (operands[i]->sizes.size() != operands[i]->strides.size()) {
      return std::string("baddbmm: ") + names[i] + " does not have as many strides as sizes";
    }
    const bool is_out = i == 0;  // out is written: no expanded dimension
    if (!dense(is_out ? operands[i]->sizes : feed_shape(*operands[i]), operands[i]->strides)) {
      return std::string("baddbmm: ") + names[i] + " of sizes " + shape_text(operands[i]->sizes) + " and strides " +
             shape_text(operands[i]->strides) + " is not dense row-major memory (expanded dimensions aside)";
    }
  }
  if (batch1.sizes.size() != 3 || batch2.sizes.size() != 3) {
    return "baddbmm: batch1 and batch2 must be 3-D, got " + shape_text(batch1.sizes) + " and " +
           shape_text(batch2.sizes);
  }
  if (batch1.sizes[0] != batch2.sizes[0] || batch1.sizes[2] != batch2.sizes[1]) {
    return "baddbmm: batch1 " + shape_text(batch1.sizes) + " and batch2 " + shape_text(batch2.sizes) +
           " cannot be multiplied batch by batch";
  }
  Call planned;
  planned.dtype = batch1.dtype;
  planned.batch = batch1.sizes[0];
  planned.rows = batch1.sizes[1];
  planned.inner = batch1.sizes[2];
  planned.cols = batch2.sizes[2];
  planned.beta = beta;
  planned.alpha = alpha;
  planned.batch1_shape = feed_shape(batch1);
  planned.batch2_shape = feed_shape(batch2);
  const std::vector<int64_t> result = {planned.batch, planned.rows, planned.cols};
  if (out.sizes != result) {
    return "baddbmm: out has sizes " + shape_text(out.sizes) + ", expected " + shape_text(result);
  }
  if (self.sizes.size() > 3) return "baddbmm: self " + shape_text(self.sizes) + " has more than 3 dimensions";
  std::vector<int64_t> self_sizes(3 - self.sizes.size(), 1);
  self_sizes.insert(self_sizes.end(), self.sizes.begin(), self.sizes.end());
  const std::vector<int64_t> self_feed = feed_shape(self);
  planned.self_shape.assign(3 - self_feed.size(), 1);
  planned.self_shape.insert(planned.self_shape.end(), self_feed.begin(), self_feed.end());
  for (int i = 0; i < 3; ++i) {
    if (self_sizes[i] != 1 && self_sizes[i] != result[i]) {
      return "baddbmm: self " + shape_text(self.sizes) + " does not broadcast to " + shape_text(result);
    }
  }
  *call = planned;
  return "";
}

// The host module's kernel: runs `call` on shimkit.objc's Metal (Linux) or the Mac's, over buffers holding copies
// of the host memory given; "" or the error. Defined in baddbmm_host.mm.
std::string baddbmm_on_host(const Call& call, const void* self, const void* batch1, const void* batch2, void* out);

}  // namespace mpsgraph_baddbmm

#ifdef __OBJC__
#import <Metal/Metal.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <functional>

namespace mpsgraph_baddbmm {

// The operands' buffers; each operand's data starts at its buffer's start. Those the call does not read may be nil.
struct Buffers {
  id<MTLBuffer> self = nil;
  id<MTLBuffer> batch1 = nil;
  id<MTLBuffer> batch2 = nil;
  id<MTLBuffer> out = nil;
};

// Runs `graph` on `feeds`, writing `results`, and returns once it has finished (run_baddbmm releases what it made
// when this returns). It must not throw: it reports a failure through its own channel.
using Execute = std::function<void(MPSGraph* graph, NSDictionary* feeds, NSDictionary* results)>;

// Builds the call's graph (float32 arithmetic, one rounding to the dtype at the end) and hands it to `execute`.
// "" or the NSException MPSGraph raised, as text. Every object it makes is released on every path.
std::string run_baddbmm(const Call& call, const Buffers& buffers, const Execute& execute);

}  // namespace mpsgraph_baddbmm
#endif  // __OBJC__
