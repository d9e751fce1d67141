// aten::randint.low_out for ExecuTorch's Metal runtime (aoti_torch_mps_randint_low_out, dispatched by
// randint_shim_mps.mm) and, unchanged, for shimkit.metal on Linux (the plugin's launch_randint_low_out).
//
// Inductor calls it for one thing: the int64 seeds (low = INT64_MIN, high = INT64_MAX) from which its
// generated Metal code draws rand, randn and bernoulli with c10/metal/random.h's Philox. Each element's
// bits depend only on (seed, index) through SplitMix64's finaliser, so one thread per element needs no
// state; the host supplies a fresh 64-bit seed per call. The bits map to [low, high) as ATen's
// uniform_int_from_to does: 32 bits modulo the range below 2^32, 64 bits modulo it above (the range, up
// to 2^64 - 1, is computed in unsigned arithmetic, where it cannot overflow).
#include <metal_stdlib>
using namespace metal;

inline ulong splitmix64(ulong z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
  return z ^ (z >> 31);
}

kernel void randint_low_out_long(device long* out [[buffer(0)]],
                                 constant long& low [[buffer(1)]],
                                 constant long& high [[buffer(2)]],
                                 constant long& seed [[buffer(3)]],
                                 uint index [[thread_position_in_grid]]) {
  const ulong bits = splitmix64(static_cast<ulong>(seed) + (static_cast<ulong>(index) + 1UL) * 0x9e3779b97f4a7c15UL);
  const ulong range = static_cast<ulong>(high) - static_cast<ulong>(low);
  const ulong offset = range < (1UL << 32) ? (bits >> 32) % range : bits % range;
  out[index] = static_cast<long>(static_cast<ulong>(low) + offset);
}
