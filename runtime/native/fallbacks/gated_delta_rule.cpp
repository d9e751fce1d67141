// Stands in for the Metal runtime's op_gated_delta_rule.mm: aoti_torch_mps_gated_delta_rule,
// ExecuTorch's metal::gated_delta_rule(q, k, v, g, beta, state), the linear-attention recurrence
// over t = 0 .. T-1 of ExecuTorch's Python reference, per batch b and value head h (key head
// h / (Hv / Hk)):
//   S = S * g[t];  delta = (v[t] - S k[t]) * beta[t];  S = S + delta k[t]^T;  y[t] = S q[t]
// with S the [Dv, Dk] state (g is the decay, already exponentiated). The state stays float32 for the
// whole sequence and is written back into `state` in place, rounded once, as the op's schema mutates
// it; y is a new contiguous [B, T, Hv, Dv] tensor of q's dtype.
//
// What upstream reads (op_gated_delta_rule.mm at pytorch/executorch cff6f4d; each noted as a divergence where an
// operand's strides say otherwise): every operand through sizes() alone, as a dense buffer from its data pointer:
// q and k as [B, T, Hk, Dk], v and y as [B, T, Hv, Dv], g and beta as [B, T, Hv] (:65-86), and state read and
// written back as a dense [B, Hv, Dv, Dk] (:76-77, :120, :287-289), rounded once to its dtype there.
//
// Refused as upstream refuses, with its messages (:199-250): q, v or state not 4-D, Dk not a multiple of 32, dtypes
// other than float32 and bfloat16, and any (Dk, Dv, Hk, Hv) it has no kernel for: it instantiates (128, 128, 32, 32)
// and (64, 64, 4, 4) only (:143-147). Refused here where upstream would read past a buffer's end or reinterpret one
// (the kernel binds every operand as q's dtype): k, g, beta and state of other shapes, an operand of another dtype,
// an operand spanning fewer elements than the dense read takes.
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

struct Shape {
  int64_t dk, dv, hk, hv;
};
// The kernels op_gated_delta_rule.mm instantiates.
constexpr Shape kUpstreamKernels[] = {{128, 128, 32, 32}, {64, 64, 4, 4}};

constexpr const char* kSymbol = "aoti_torch_mps_gated_delta_rule";
constexpr const char* kFile = "op_gated_delta_rule.mm";

Status require_shape(const Arg& arg, const std::vector<int64_t>& shape, const char* layout) {
  if (arg.view.sizes == shape) return Status::ok();
  return invalid(arg.name + " must be " + layout + " = " + format_shape(shape) + ", got " + arg.describe());
}

Status read_densely(const Arg& arg, const char* assumed, Arg* read) {
  return read_as_upstream(kSymbol, kFile, "", arg, contiguous_strides(arg.view.sizes), assumed, read);
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
  if (q.dim() != 4 || v.dim() != 4 || state.dim() != 4) {
    return invalid("q/v must be 4D, state must be 4D (got q " + q.describe() + ", v " + v.describe() + ", state " +
                   state.describe() + ")");
  }
  const int64_t batch = q.size(0), steps = q.size(1), hk = q.size(2), dk = q.size(3);
  const int64_t hv = v.size(2), dv = v.size(3);
  if (dk % 32 != 0) return invalid("Dk=" + std::to_string(dk) + " must be multiple of 32");
  if (q.code != float32_code() && q.code != bfloat16_code()) {
    return invalid("Unsupported dtype " + dtype_text(q.code) + " of q (" + kFile + " has float32 and bfloat16 kernels)");
  }
  bool has_kernel = false;
  for (const Shape& shape : kUpstreamKernels) {
    has_kernel = has_kernel || (shape.dk == dk && shape.dv == dv && shape.hk == hk && shape.hv == hv);
  }
  if (!has_kernel) {
    return unsupported("Kernel not found: gated_delta_step_" + std::string(q.code == float32_code() ? "float" : "bfloat") +
                       "_dk" + std::to_string(dk) + "_dv" + std::to_string(dv) + "_hk" + std::to_string(hk) + "_hv" +
                       std::to_string(hv) + " (" + kFile +
                       " instantiates (Dk, Dv, Hk, Hv) = (128, 128, 32, 32) and (64, 64, 4, 4) only)");
  }
  for (const Arg* arg : {&k, &v, &g, &beta, &state}) SHIMKIT_RETURN_IF_ERROR(require_bound_as(*arg, q, kFile));
  SHIMKIT_RETURN_IF_ERROR(require_shape(k, q.view.sizes, "[B, T, Hk, Dk] like q"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(v, {batch, steps, hv, dv}, "[B, T, Hv, Dv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(g, {batch, steps, hv}, "[B, T, Hv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(beta, {batch, steps, hv}, "[B, T, Hv]"));
  SHIMKIT_RETURN_IF_ERROR(require_shape(state, {batch, hv, dv, dk}, "[B, Hv, Dv, Dk]"));
  SHIMKIT_RETURN_IF_ERROR(require_writable(state));
  SHIMKIT_RETURN_IF_ERROR(read_densely(q, "a dense [B, T, Hk, Dk] buffer", &q));
  SHIMKIT_RETURN_IF_ERROR(read_densely(k, "a dense [B, T, Hk, Dk] buffer", &k));
  SHIMKIT_RETURN_IF_ERROR(read_densely(v, "a dense [B, T, Hv, Dv] buffer", &v));
  SHIMKIT_RETURN_IF_ERROR(read_densely(g, "a dense [B, T, Hv] buffer", &g));
  SHIMKIT_RETURN_IF_ERROR(read_densely(beta, "a dense [B, T, Hv] buffer", &beta));
  SHIMKIT_RETURN_IF_ERROR(read_densely(state, "a dense [B, Hv, Dv, Dk] buffer", &state));

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(q, {batch, steps, hv, dv}, q.code, "y", &output));
  const Arg& y = output.arg;
  const int64_t repeat = hv / hk;
  std::vector<float> s(static_cast<std::size_t>(dv * dk));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hv; ++h) {
      const int64_t kh = h / repeat;
      const int64_t state_base = (b * hv + h) * dv * dk;
      for (int64_t e = 0; e < dv * dk; ++e) s[static_cast<std::size_t>(e)] = state.load(state_base + e);
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t qk_base = ((b * steps + t) * hk + kh) * dk;
        const int64_t v_base = ((b * steps + t) * hv + h) * dv;
        const float decay = g.load((b * steps + t) * hv + h);
        const float rate = beta.load((b * steps + t) * hv + h);
        for (int64_t i = 0; i < dv; ++i) {
          float* row = s.data() + i * dk;
          float memory = 0.0f;
          for (int64_t j = 0; j < dk; ++j) {
            row[j] *= decay;
            memory += row[j] * k.load(qk_base + j);
          }
          const float delta = (v.load(v_base + i) - memory) * rate;
          float out = 0.0f;
          for (int64_t j = 0; j < dk; ++j) {
            row[j] += k.load(qk_base + j) * delta;
            out += row[j] * q.load(qk_base + j);
          }
          y.store(v_base + i, out);
        }
      }
      for (int64_t e = 0; e < dv * dk; ++e) state.store(state_base + e, s[static_cast<std::size_t>(e)]);
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
