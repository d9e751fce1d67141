// The reference device: CPU-addressable memory, the product through the SDK's matrix product. It is what tests
// compare against torch.addmm, what runs behind the Linux c-shim symbol, and the semantics the Metal graph must match.
#include <vector>

#include "addmm_plan.h"
#include "shimkit/matrix_product.h"

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

  // The product is computed into float32 before out is written (accumulation is in float32 for the 16-bit types, as
  // torch's CPU kernels do, and out may alias an input): the SDK's blocked, vectorised matrix product, each
  // element summed over k in order with fused multiply-adds.
  std::vector<float> products, bias;
  if (plan.uses_product) {
    const TensorView& a = ops.mat1;
    const TensorView& b = ops.mat2;
    products.resize(static_cast<std::size_t>(m * n));
    matrix_product(1, m, k, n, MatrixOperand{a.data, dtype, 0, a.strides[0], a.strides[1]},
                   MatrixOperand{b.data, dtype, 0, b.strides[0], b.strides[1]}, products.data());
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
      if (plan.uses_product) value = alpha * products[i * n + j];
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
