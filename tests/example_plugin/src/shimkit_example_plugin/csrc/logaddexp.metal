// logaddexp for ExecuTorch's Metal runtime: one thread per element of out, computed in float and rounded
// once to the tensor's dtype; equal infinities give that infinity, as torch.logaddexp does. shimkit's
// generated c-shim adapter dispatches logaddexp_<dtype> for aoti_torch_mps_logaddexp_out; on Linux
// shimkit.testing runs this same file through shimkit.metal against torch.logaddexp.
#include <metal_stdlib>
using namespace metal;

template <typename T>
kernel void logaddexp(device T* out [[buffer(0)]], constant T* a [[buffer(1)]], constant T* b [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
  const float x = static_cast<float>(a[i]);
  const float y = static_cast<float>(b[i]);
  float result;
  if (isnan(x) || isnan(y)) {
    result = NAN;
  } else if (isinf(x) && x == y) {
    result = x;
  } else {
    result = precise::max(x, y) + precise::log(1.0f + precise::exp(-precise::abs(x - y)));
  }
  out[i] = static_cast<T>(result);
}

template [[host_name("logaddexp_float")]] kernel void logaddexp<float>(device float*, constant float*, constant float*, uint);
template [[host_name("logaddexp_half")]] kernel void logaddexp<half>(device half*, constant half*, constant half*, uint);
template [[host_name("logaddexp_bfloat")]] kernel void logaddexp<bfloat>(device bfloat*, constant bfloat*, constant bfloat*, uint);
