// Stands in for the Metal runtime's op_gated_delta_rule.mm: aoti_torch_mps_gated_delta_rule,
// ExecuTorch's metal::gated_delta_rule(q, k, v, g, beta, state), the linear-attention recurrence
// over t = 0 .. T-1 of ExecuTorch's Python reference, per batch b and value head h (key head
// h / (Hv / Hk)):
//   S = S * g[t];  delta = (v[t] - S k[t]) * beta[t];  S = S + delta k[t]^T;  y[t] = S q[t]
// with S the [Dv, Dk] state (g is the decay, already exponentiated). The state stays float32 for the
// whole sequence and is written back into `state` in place, rounded once, as the op's schema mutates
// it; y is a new contiguous [B, T, Hv, Dv] tensor of q's dtype.
//
// Rejected like upstream: q, v or state not 4-D, Dk not a multiple of 32, dtypes other than float32 and
// bfloat16, and any (Dk, Dv, Hk, Hv) the Metal runtime has no kernel for: it instantiates
// (128, 128, 32, 32) and (64, 64, 4, 4) only, so another shape fails there with "kernel not found".
// Stricter than upstream, which reads every operand as dense [B, T, H, D] without checking: k, g,
// beta and state must have the shapes and dtype the recurrence needs. Operands are read through their
// strides (upstream assumes dense ones).
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

struct Shape {
  int64_t dk, dv, hk, hv;
};
// The kernels op_gated_delta_rule.mm instantiates.
constexpr Shape kUpstreamKernels[] = {{128, 128, 32, 32}, {64, 64, 4, 4}};

Status require_shape(const Arg& arg, const std::vector<int64_t>& shape, const char* layout) {
  if (arg.view.sizes == shape) return Status::ok();
  return invalid(arg.name + " must be " + layout + " = " + format_shape(shape) + ", got " + arg.describe());
}

Status gated_delta_rule(AtenTensorHandle q_handle, AtenTensorHandle k_handle, AtenTensorHandle v_handle,
                        AtenTensorHandle g_handle, AtenTensorHandle beta_handle, AtenTensorHandle state_handle,
                        AtenTensorHandle* ret) {
  if (ret == nullptr) return invalid("retY must not be null");
  Arg q, k, v, g, beta, state;
  SHIMKIT_RETURN_IF_ERROR(read_arg(q_handle, "q", &q));
  SHIMKIT_RETURN_IF_ERROR(read_arg(k_handle, "k", &k));
  SHIMKIT_RETURN_IF_ERROR(read_arg(v_handle, "v", &v));
  SHIMKIT_RETURN_IF_ERROR(read_arg(g_handle, "g", &g));
  SHIMKIT_RETURN_IF_ERROR(read_arg(beta_handle, "beta", &beta));
  SHIMKIT_RETURN_IF_ERROR(read_arg(state_handle, "state", &state));
  SHIMKIT_RETURN_IF_ERROR(require_rank(q, 4, "([B, T, Hk, Dk])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(v, 4, "([B, T, Hv, Dv])"));
  SHIMKIT_RETURN_IF_ERROR(require_rank(state, 4, "([B, Hv, Dv, Dk])"));
  const int64_t batch = q.size(0), steps = q.size(1), hk = q.size(2), dk = q.size(3);
  const int64_t hv = v.size(2), dv = v.size(3);
  if (dk % 32 != 0) return invalid("q's Dk = " + std::to_string(dk) + " is not a multiple of 32");
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(q));
  for (const Arg* arg : {&k, &v, &g, &beta, &state}) SHIMKIT_RETURN_IF_ERROR(require_same_dtype(*arg, q));
  SHIMKIT_RETURN_IF_ERROR(require_shape(k, q.view.sizes, "[B, T, Hk, Dk] like q"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(v, {batch, steps, hv, dv}, "[B, T, Hv, Dv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(g, {batch, steps, hv}, "[B, T, Hv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(beta, {batch, steps, hv}, "[B, T, Hv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(state, {batch, hv, dv, dk}, "[B, Hv, Dv, Dk]"));
  bool has_kernel = false;
  for (const Shape& shape : kUpstreamKernels) {
    has_kernel = has_kernel || (shape.dk == dk && shape.dv == dv && shape.hk == hk && shape.hv == hv);
  }
  if (!has_kernel) {
    return unsupported("(Dk, Dv, Hk, Hv) = (" + std::to_string(dk) + ", " + std::to_string(dv) + ", " +
                       std::to_string(hk) + ", " + std::to_string(hv) +
                       ") has no Metal kernel: the runtime instantiates (128, 128, 32, 32) and (64, 64, 4, 4) only");
  }
  SHIMKIT_RETURN_IF_ERROR(require_writable(state));

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(q, {batch, steps, hv, dv}, q.code, "y", &output));
  const Arg& y = output.arg;
  const int64_t repeat = hv / hk;
  std::vector<float> s(static_cast<std::size_t>(dv * dk)), kt(static_cast<std::size_t>(dk)),
      qt(static_cast<std::size_t>(dk));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hv; ++h) {
      const int64_t kh = h / repeat;
      const int64_t state_base = b * state.stride(0) + h * state.stride(1);
      for (int64_t i = 0; i < dv; ++i)
        for (int64_t j = 0; j < dk; ++j)
          s[static_cast<std::size_t>(i * dk + j)] = state.load(state_base + i * state.stride(2) + j * state.stride(3));
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t qk_base = b * q.stride(0) + t * q.stride(1) + kh * q.stride(2);
        const int64_t k_base = b * k.stride(0) + t * k.stride(1) + kh * k.stride(2);
        for (int64_t j = 0; j < dk; ++j) {
          qt[static_cast<std::size_t>(j)] = q.load(qk_base + j * q.stride(3));
          kt[static_cast<std::size_t>(j)] = k.load(k_base + j * k.stride(3));
        }
        const float decay = g.load(b * g.stride(0) + t * g.stride(1) + h * g.stride(2));
        const float rate = beta.load(b * beta.stride(0) + t * beta.stride(1) + h * beta.stride(2));
        const int64_t v_base = b * v.stride(0) + t * v.stride(1) + h * v.stride(2);
        const int64_t y_base = b * y.stride(0) + t * y.stride(1) + h * y.stride(2);
        for (int64_t i = 0; i < dv; ++i) {
          float* row = s.data() + i * dk;
          float memory = 0.0f;
          for (int64_t j = 0; j < dk; ++j) {
            row[j] *= decay;
            memory += row[j] * kt[static_cast<std::size_t>(j)];
          }
          const float delta = (v.load(v_base + i * v.stride(3)) - memory) * rate;
          float out = 0.0f;
          for (int64_t j = 0; j < dk; ++j) {
            row[j] += kt[static_cast<std::size_t>(j)] * delta;
            out += row[j] * qt[static_cast<std::size_t>(j)];
          }
          y.store(y_base + i * y.stride(3), out);
        }
      }
      for (int64_t i = 0; i < dv; ++i)
        for (int64_t j = 0; j < dk; ++j)
          state.store(state_base + i * state.stride(2) + j * state.stride(3), s[static_cast<std::size_t>(i * dk + j)]);
    }
  }
  return hand_over(&output, ret);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_gated_delta_rule(AtenTensorHandle Q, AtenTensorHandle K,
                                                                 AtenTensorHandle V, AtenTensorHandle G,
                                                                 AtenTensorHandle Beta, AtenTensorHandle StateIn,
                                                                 AtenTensorHandle* retY) {
  return shimkit::metal_fallbacks::run("aoti_torch_mps_gated_delta_rule", [&] {
    return shimkit::metal_fallbacks::gated_delta_rule(Q, K, V, G, Beta, StateIn, retY);
  });
}

}  // extern "C"
