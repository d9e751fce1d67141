// The SDK's matrix product, blocked and vectorised, and the threads it runs on: what the Linux Metal runtime's
// product-shaped fallbacks (mm, bmm, addmm, the 4-bit linear, gather_qmv, the convolution) and kernels such as the
// addmm plugin's reference run.
//
// Each element of a product is summed over k in order, from 0.0f, one float32 fused multiply-add per term (as the
// GPU's matrix multiply-accumulate computes a term), with the vectors running across the result's columns. So the
// result is the same bits whatever the host's vector width (AVX-512, AVX2 with FMA or none, chosen at run time)
// and however many threads run it: a verdict never depends on the machine.
#pragma once
#include <cstdint>
#include <functional>

#include "shimkit/dtype.h"

namespace shimkit {

// A batch of [rows, columns] matrices of float32, bfloat16 or float16 elements, at any strides (in elements).
struct MatrixOperand {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t column_stride = 1;
};

// out[b] = lhs[b] @ rhs[b] for b < batch, lhs[b] of [m, k], rhs[b] of [k, n]; `out` is float32 [batch, m, n],
// dense row-major, and may not overlap the operands.
void matrix_product(int64_t batch, int64_t m, int64_t k, int64_t n, const MatrixOperand& lhs,
                    const MatrixOperand& rhs, float* out);

// How many threads the SDK's CPU work uses: SHIMKIT_CPU_THREADS when set to a positive number, else the cores
// std::thread reports (as eager torch uses every core).
int cpu_threads();

// Runs body(begin, end) over [0, items) in contiguous chunks, on up to cpu_threads() threads when the work
// (`work_per_item` times `items`, in multiply-adds) is worth starting them for; the caller's thread takes a share.
// A body must not depend on which thread runs which chunk; an exception in one is rethrown here.
void parallel_for(int64_t items, double work_per_item, const std::function<void(int64_t, int64_t)>& body);

}  // namespace shimkit
