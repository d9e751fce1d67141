// The reference device: plain loops over CPU-addressable memory. It is what tests compare against
// torch.addmm, what runs behind the Linux c-shim symbol, and the semantics the Metal graph must match.
#include <vector>

#include "addmm_plan.h"

namespace shimkit {
namespace addmm {

Status run_reference(const Plan& plan, const Operands& ops) {
  // make_plan already checked that all four share mat1's device.
  if (ops.mat1.device.type != DeviceType::kCPU) {
    return Status::unsupported("addmm: the reference kernel reads memory directly and cannot run on " +
                               device_name(ops.mat1.device));
  }
  if (plan.output_empty) return Status::ok();
  const int64_t m = plan.m, k = plan.k, n = plan.n;
  const DType dtype = plan.dtype;

  // Every input is converted to float before out is written: accumulation is in float32 for the
  // 16-bit types (as torch's CPU kernels do), and out may alias an input.
  std::vector<float> lhs, rhs_t, bias;
  if (plan.uses_product) {
    lhs.resize(static_cast<std::size_t>(m * k));
    rhs_t.resize(static_cast<std::size_t>(n * k));
    const TensorView& a = ops.mat1;
    const TensorView& b = ops.mat2;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        lhs[i * k + p] = load_float(a.data, dtype, i * a.strides[0] + p * a.strides[1]);
    // mat2 transposed so both dot-product operands are read with unit stride.
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        rhs_t[j * k + p] = load_float(b.data, dtype, p * b.strides[0] + j * b.strides[1]);
  }
  const TensorView self = unbroadcast(plan.self_expanded);
  const int64_t bias_rows = self.sizes[0], bias_cols = self.sizes[1];
  if (plan.uses_self) {
    bias.resize(static_cast<std::size_t>(bias_rows * bias_cols));
    for (int64_t r = 0; r < bias_rows; ++r)
      for (int64_t c = 0; c < bias_cols; ++c)
        bias[r * bias_cols + c] =
            load_float(self.data, dtype, r * self.strides[0] + c * self.strides[1]);
  }

  const float alpha = plan.alpha;
  const float beta = plan.beta;
  const TensorView& out = ops.out;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float value = 0.0f;
      if (plan.uses_product) {
        const float* row = &lhs[i * k];
        const float* col = &rhs_t[j * k];
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) acc += row[p] * col[p];
        value = alpha * acc;
      }
      if (plan.uses_self) {
        value += beta * bias[(bias_rows == 1 ? 0 : i) * bias_cols + (bias_cols == 1 ? 0 : j)];
      }
      store_float(out.data, dtype, i * out.strides[0] + j * out.strides[1], value);
    }
  }
  return Status::ok();
}

}  // namespace addmm
}  // namespace shimkit
