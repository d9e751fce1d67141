// How an operand's elements lie in memory, decided from sizes and strides alone.
//
// A device that feeds buffers to a graph (MPSGraph reads a buffer as dense row-major from its start)
// must know this before it can feed an operand; reading strides wrongly is how upstream's op_mm.mm
// computes silently wrong results for a transposed self.
#pragma once

#include <cstdint>
#include <vector>

#include "shimkit/tensor_view.h"

namespace shimkit {

enum class Layout : int32_t {
  kContiguous = 0,  // dense row-major; dimensions of size 1 may have any stride
  kTransposed = 1,  // rank 2, dense column-major: a .t() or .mT of a contiguous matrix
  kBroadcast = 2,   // some dimension of size > 1 has stride 0 (an expand); classify unbroadcast()
                    // to learn how the remaining elements lie
  kStrided = 3,     // anything else: a slice with a leading dimension, a step, a permutation ...
};

const char* layout_name(Layout layout);

// Empty tensors classify as contiguous: no element is read, so no layout is needed.
Layout classify_layout(const TensorView& view);

// The sizes with every 0-stride dimension collapsed to 1: the smallest tensor that, broadcast to
// `view.sizes`, gives `view`. A graph can be fed this and broadcast it itself.
std::vector<int64_t> unbroadcast_sizes(const TensorView& view);

// The view restricted to unbroadcast_sizes (same data, same strides).
TensorView unbroadcast(const TensorView& view);

}  // namespace shimkit
