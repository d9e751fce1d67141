// FFTs of any length over rows of complex values stored as real pairs (float2: real, imaginary; the
// layout of torch.view_as_real), for the complex_pairs pass on Metal, which has no complex dtype.
//
// A length whose prime factors are all at most 13 is a mixed-radix Stockham autosort FFT (Govindaraju et
// al., "High performance discrete Fourier transforms on graphics processors", SC 2008): one dispatch per
// radix, each thread one radix-R butterfly, results written in natural order. Any other length is
// Bluestein's chirp-z transform: the row times a chirp, circularly convolved with the conjugate chirp
// through power-of-two FFTs, times the chirp again. Every angle is reduced exactly in integers before the
// float cos/sin ((k r) mod span, (j * j) mod 2n), so that terms that vanish mathematically vanish.
// `sign` is -1 for a forward transform and +1 for an inverse one; `scale` multiplies what the last
// dispatch writes (the norm).

#include <metal_stdlib>
using namespace metal;

constant uint kMaxRadix = 13;
constant float kTwoPi = 6.28318530717958647692f;

inline float2 rotate(float2 v, float angle) {
  const float c = cos(angle), s = sin(angle);
  return float2(v.x * c - v.y * s, v.x * s + v.y * c);
}

// One radix pass: `done` is the product of the radices of earlier passes.
kernel void fft_stockham_pass_float(device float2* out [[buffer(0)]], constant float2* in [[buffer(1)]],
                              constant uint& n [[buffer(2)]], constant uint& radix [[buffer(3)]],
                              constant uint& done [[buffer(4)]], constant int& sign [[buffer(5)]],
                              constant float& scale [[buffer(6)]], uint2 position [[thread_position_in_grid]]) {
  const uint stride = n / radix;
  const uint j = position.x;
  if (j >= stride) return;
  constant float2* x = in + ulong(position.y) * n;
  device float2* y = out + ulong(position.y) * n;
  const uint k = j % done;
  const uint span = done * radix;
  float2 v[kMaxRadix];
  for (uint r = 0; r < radix; ++r) {
    const uint turn = (k * r) % span;
    v[r] = rotate(x[j + r * stride], float(sign) * kTwoPi * float(turn) / float(span));
  }
  const uint base = (j / done) * span + k;
  for (uint q = 0; q < radix; ++q) {
    float2 sum = float2(0.0f);
    for (uint r = 0; r < radix; ++r)
      sum += rotate(v[r], float(sign) * kTwoPi * float((q * r) % radix) / float(radix));
    y[base + q * done] = sum * scale;
  }
}

inline float2 chirp(uint j, uint n, int sign) {
  const uint turn = uint((ulong(j) * j) % (2ul * n));  // exp(sign i pi j^2 / n) has period 2n in j^2
  const float angle = float(sign) * M_PI_F * float(turn) / float(n);
  return float2(cos(angle), sin(angle));
}

inline float2 times(float2 a, float2 b) { return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }

// Bluestein, first step: rows of n values times the chirp, zero-padded to m.
kernel void fft_bluestein_chirp_float(device float2* out [[buffer(0)]], constant float2* in [[buffer(1)]],
                                constant uint& n [[buffer(2)]], constant uint& m [[buffer(3)]],
                                constant int& sign [[buffer(4)]], uint2 position [[thread_position_in_grid]]) {
  const uint j = position.x;
  if (j >= m) return;
  out[ulong(position.y) * m + j] = j < n ? times(in[ulong(position.y) * n + j], chirp(j, n, sign)) : float2(0.0f);
}

// The filter: the conjugate chirp at circular offsets -(n - 1) .. n - 1 of a row of m.
kernel void fft_bluestein_filter_float(device float2* out [[buffer(0)]], constant uint& n [[buffer(1)]],
                                 constant uint& m [[buffer(2)]], constant int& sign [[buffer(3)]],
                                 uint j [[thread_position_in_grid]]) {
  if (j >= m) return;
  const uint offset = j < n ? j : (m - j < n ? m - j : 0u);
  out[j] = (j < n || m - j < n) ? chirp(offset, n, -sign) : float2(0.0f);
}

// Each row's spectrum times the filter's.
kernel void fft_bluestein_multiply_float(device float2* rows [[buffer(0)]], constant float2* filter [[buffer(1)]],
                                   constant uint& m [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  if (position.x >= m) return;
  device float2& value = rows[ulong(position.y) * m + position.x];
  value = times(value, filter[position.x]);
}

// Last step: the first n values of each row times the chirp and `scale`.
kernel void fft_bluestein_finish_float(device float2* out [[buffer(0)]], constant float2* in [[buffer(1)]],
                                 constant uint& n [[buffer(2)]], constant uint& m [[buffer(3)]],
                                 constant int& sign [[buffer(4)]], constant float& scale [[buffer(5)]],
                                 uint2 position [[thread_position_in_grid]]) {
  const uint k = position.x;
  if (k >= n) return;
  out[ulong(position.y) * n + k] = times(in[ulong(position.y) * m + k], chirp(k, n, sign)) * scale;
}
