// Metal's synchronisation: threadgroup_barrier, simdgroup functions over 32 lanes, and atomics.
#pragma once

#include "runtime.h"

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) { shimkit_metal::threadgroup_barrier_wait(); }

namespace simd_detail {
using shimkit_metal::Fiber;
using shimkit_metal::kSimdWidth;
using shimkit_metal::lane_value;
using shimkit_metal::set_result;

// Where a combine finds its lanes: the records of fibers waiting at the call (null: an inactive lane), or
// the per-thread arrays of a split kernel (loops.h). One combine serves both, so they give the same bits.
struct FiberLanes {
  Fiber** lanes;
  bool active(uint i) const { return lanes[i] != nullptr; }
  bool full() const {
    for (uint i = 0; i < kSimdWidth; ++i)
      if (!lanes[i]) return false;
    return true;
  }
  template <class T> T value(uint i) const { return lane_value<T>(lanes[i]); }
  long argument(uint i) const { return lanes[i]->argument; }
  template <class T> void set(uint i, const T& v) const { set_result(lanes[i], v); }
  template <class T> void set_all(const T& v) const {
    for (uint i = 0; i < kSimdWidth; ++i) set_result(lanes[i], v);
  }
};
template <class V, class A = long> struct ArrayLanes {
  const bool* on;
  V* results;
  const V* values;
  const A* arguments = nullptr;
  bool active(uint i) const { return on[i]; }
  bool full() const {  // 32 bools of value 1, read as four words
    unsigned long long words[kSimdWidth / 8];
    std::memcpy(words, on, sizeof(words));
    return (words[0] & words[1] & words[2] & words[3]) == shimkit_metal::kAllEight;
  }
  template <class T> T value(uint i) const { return values[i]; }
  long argument(uint i) const { return long(arguments[i]); }
  template <class T> void set(uint i, const T& v) const { results[i] = v; }
  // Through a local pointer: with -fno-strict-aliasing a store through `results` might change `results`.
  template <class T> void set_all(const T& v) const {
    V* const out = results;
    for (uint i = 0; i < kSimdWidth; ++i) out[i] = v;
  }
};

// A full simdgroup combines as a butterfly (lane i with lane i + 16, then + 8, ...), the order a GPU's
// shuffle reduction takes, in five steps the compiler vectorises; a partial one lane after lane.
template <class T, class Op, uint Width> inline void fold_half(T* v) {
  for (uint i = 0; i < Width; ++i) v[i] = Op()(v[i], v[i + Width]);
}
// A full simdgroup's butterfly: `v`, its 32 lanes' values, folded in place; the result.
template <class T, class Op> inline T fold_simdgroup(T* v) {
  static_assert(kSimdWidth == 32, "the butterfly folds 32 lanes");
  fold_half<T, Op, 16>(v);
  fold_half<T, Op, 8>(v);
  fold_half<T, Op, 4>(v);
  fold_half<T, Op, 2>(v);
  fold_half<T, Op, 1>(v);
  return v[0];
}
template <class T, class Op, class Lanes> void reduce_lanes(const Lanes& lanes) {
  if (lanes.full()) {
    T v[kSimdWidth];
    for (uint i = 0; i < kSimdWidth; ++i) v[i] = lanes.template value<T>(i);
    lanes.set_all(fold_simdgroup<T, Op>(v));
    return;
  }
  bool have = false;
  T acc{};
  for (uint i = 0; i < kSimdWidth; ++i) {
    if (!lanes.active(i)) continue;
    T v = lanes.template value<T>(i);
    acc = have ? Op()(acc, v) : v;
    have = true;
  }
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes.active(i)) lanes.set(i, acc);
}
template <class T, class Op, bool Inclusive, class Lanes> void prefix_lanes(const Lanes& lanes, T identity) {
  T acc = identity;
  for (uint i = 0; i < kSimdWidth; ++i) {
    if (!lanes.active(i)) continue;
    T v = lanes.template value<T>(i);
    if (Inclusive) acc = Op()(acc, v);
    lanes.set(i, acc);
    if (!Inclusive) acc = Op()(acc, v);
  }
}
// Lane i reads lane source(i, argument); an inactive or out-of-range source leaves the value unchanged.
template <class T, long (*Source)(long, long), class Lanes> void shuffle_lanes(const Lanes& lanes) {
  for (uint i = 0; i < kSimdWidth; ++i) {
    if (!lanes.active(i)) continue;
    const long from = Source(long(i), lanes.argument(i));
    lanes.set(i, lanes.template value<T>(from >= 0 && from < long(kSimdWidth) && lanes.active(uint(from)) ? uint(from) : i));
  }
}
template <class T, class Lanes> void broadcast_first_lanes(const Lanes& lanes) {
  uint first = 0;
  while (first < kSimdWidth && !lanes.active(first)) ++first;
  if (first == kSimdWidth) return;
  const T v = lanes.template value<T>(first);
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes.active(i)) lanes.set(i, v);
}
inline long source_at(long, long a) { return a; }
inline long source_down(long i, long a) { return i + a; }
inline long source_up(long i, long a) { return i - a; }
inline long source_xor(long i, long a) { return i ^ a; }
inline long source_rotate_down(long i, long a) { return (i + a) % long(kSimdWidth); }
inline long source_rotate_up(long i, long a) { return ((i - a) % long(kSimdWidth) + long(kSimdWidth)) % long(kSimdWidth); }

template <class T, class Op> void reduce(Fiber** lanes) { reduce_lanes<T, Op>(FiberLanes{lanes}); }
template <class T, class Op, bool Inclusive> void prefix(Fiber** lanes, T identity) {
  prefix_lanes<T, Op, Inclusive>(FiberLanes{lanes}, identity);
}
template <class T> void broadcast(Fiber** lanes) { shuffle_lanes<T, &source_at>(FiberLanes{lanes}); }
template <class T> void broadcast_first(Fiber** lanes) { broadcast_first_lanes<T>(FiberLanes{lanes}); }
template <class T, long (*Source)(long, long)> void shuffle(Fiber** lanes) { shuffle_lanes<T, Source>(FiberLanes{lanes}); }

// and_fill: within segments of `modulo` lanes (argument = delta | modulo << 16), lanes shifted past the
// segment's end (down) or start (up) read the fill value of the lane that far into the segment. A lane
// shifted onto an inactive lane inside the segment reads zero bits: Metal leaves it undefined, Apple silicon
// gives 0, and c10's 64-bit simd_sum (Inductor's integer reductions over fewer than 32 threads) counts on
// that (c10/metal/reduction_utils.h's note); reading the lane's own value counted it twice.
template <class T, bool Down> void shuffle_fill(Fiber** lanes) {
  for (uint i = 0; i < kSimdWidth; ++i) {
    if (!lanes[i]) continue;
    const long delta = lanes[i]->argument & 0xffff, width = lanes[i]->argument >> 16;
    const long segment = long(i) - long(i) % width, at = long(i) % width;
    const long shifted = Down ? at + delta : at - delta;
    const bool inside = shifted >= 0 && shifted < width;
    const long from = segment + (inside ? shifted : (Down ? shifted - width : shifted + width));
    const bool active = from >= 0 && from < long(kSimdWidth) && lanes[from];
    const Fiber* source = active ? lanes[from] : lanes[i];
    T value;
    if (inside && !active)
      std::memset(static_cast<void*>(&value), 0, sizeof(T));
    else
      std::memcpy(static_cast<void*>(&value), inside ? source->value : source->fill, sizeof(T));
    set_result(lanes[i], value);
  }
}
inline void ballot(Fiber** lanes) {
  unsigned long bits = 0;
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes[i] && lane_value<unsigned long>(lanes[i])) bits |= 1ul << i;
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes[i]) set_result(lanes[i], bits);
}
inline void active_mask(Fiber** lanes) {
  unsigned long bits = 0;
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes[i]) bits |= 1ul << i;
  for (uint i = 0; i < kSimdWidth; ++i)
    if (lanes[i]) set_result(lanes[i], bits);
}
struct plus { template <class T> T operator()(const T& a, const T& b) const { return a + b; } };
struct times { template <class T> T operator()(const T& a, const T& b) const { return a * b; } };
struct minimum { template <class T> T operator()(const T& a, const T& b) const { return metal::min(a, b); } };
struct maximum { template <class T> T operator()(const T& a, const T& b) const { return metal::max(a, b); } };
struct bit_and { template <class T> T operator()(const T& a, const T& b) const { return a & b; } };
struct bit_or { template <class T> T operator()(const T& a, const T& b) const { return a | b; } };
struct bit_xor { template <class T> T operator()(const T& a, const T& b) const { return a ^ b; } };
template <class T, class Op, bool Inclusive, int Identity> void prefix_op(Fiber** lanes) { prefix<T, Op, Inclusive>(lanes, T(Identity)); }
}  // namespace simd_detail

#define SHIMKIT_SIMD_REDUCE(name, op)                                                              \
  template <class T> inline T name(T v) {                                                           \
    return shimkit_metal::simd_collective<T>(v, &simd_detail::reduce<T, simd_detail::op>);          \
  }
SHIMKIT_SIMD_REDUCE(simd_sum, plus)
SHIMKIT_SIMD_REDUCE(simd_product, times)
SHIMKIT_SIMD_REDUCE(simd_min, minimum)
SHIMKIT_SIMD_REDUCE(simd_max, maximum)
SHIMKIT_SIMD_REDUCE(simd_and, bit_and)
SHIMKIT_SIMD_REDUCE(simd_or, bit_or)
SHIMKIT_SIMD_REDUCE(simd_xor, bit_xor)
#undef SHIMKIT_SIMD_REDUCE

template <class T> inline T simd_prefix_inclusive_sum(T v) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::prefix_op<T, simd_detail::plus, true, 0>);
}
template <class T> inline T simd_prefix_exclusive_sum(T v) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::prefix_op<T, simd_detail::plus, false, 0>);
}
template <class T> inline T simd_prefix_inclusive_product(T v) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::prefix_op<T, simd_detail::times, true, 1>);
}
template <class T> inline T simd_prefix_exclusive_product(T v) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::prefix_op<T, simd_detail::times, false, 1>);
}
template <class T> inline T simd_broadcast(T v, ushort lane) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::broadcast<T>, lane);
}
template <class T> inline T simd_broadcast_first(T v) {
  return shimkit_metal::simd_collective<T>(v, &simd_detail::broadcast_first<T>);
}
#define SHIMKIT_SIMD_SHUFFLE(name, source)                                                         \
  template <class T> inline T name(T v, ushort a) {                                                 \
    return shimkit_metal::simd_collective<T>(v, &simd_detail::shuffle<T, &simd_detail::source>, a); \
  }
SHIMKIT_SIMD_SHUFFLE(simd_shuffle, source_at)
SHIMKIT_SIMD_SHUFFLE(simd_shuffle_down, source_down)
SHIMKIT_SIMD_SHUFFLE(simd_shuffle_up, source_up)
SHIMKIT_SIMD_SHUFFLE(simd_shuffle_xor, source_xor)
SHIMKIT_SIMD_SHUFFLE(simd_shuffle_rotate_down, source_rotate_down)
SHIMKIT_SIMD_SHUFFLE(simd_shuffle_rotate_up, source_rotate_up)
#undef SHIMKIT_SIMD_SHUFFLE
template <class T> inline T simd_shuffle_and_fill_down(T data, T fill, ushort delta, ushort modulo = 32) {
  return shimkit_metal::simd_collective<T>(data, &simd_detail::shuffle_fill<T, true>, long(delta) | (long(modulo) << 16), &fill);
}
template <class T> inline T simd_shuffle_and_fill_up(T data, T fill, ushort delta, ushort modulo = 32) {
  return shimkit_metal::simd_collective<T>(data, &simd_detail::shuffle_fill<T, false>, long(delta) | (long(modulo) << 16), &fill);
}

struct simd_vote {
  using vote_t = unsigned long;
  vote_t bits;
  explicit simd_vote(vote_t b = 0) : bits(b) {}
  explicit operator vote_t() const { return bits; }
  bool all() const { return bits == active; }
  bool any() const { return bits != 0; }
  vote_t active = 0;
};
inline simd_vote simd_ballot(bool predicate) {
  unsigned long active = shimkit_metal::simd_collective<unsigned long>(0ul, &simd_detail::active_mask);
  simd_vote vote(shimkit_metal::simd_collective<unsigned long>(predicate ? 1ul : 0ul, &simd_detail::ballot));
  vote.active = active;
  return vote;
}
inline bool simd_any(bool predicate) { return simd_ballot(predicate).any(); }
inline bool simd_all(bool predicate) { return simd_ballot(predicate).all(); }
inline simd_vote simd_active_threads_mask() {
  simd_vote vote(shimkit_metal::simd_collective<unsigned long>(0ul, &simd_detail::active_mask));
  vote.active = vote.bits;
  return vote;
}
inline bool simd_is_first() {
  unsigned long active = shimkit_metal::simd_collective<unsigned long>(0ul, &simd_detail::active_mask);
  return shimkit_metal::executing.fiber->info.lane == uint(__builtin_ctzl(active));
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) {
  shimkit_metal::simd_collective<unsigned long>(0ul, &simd_detail::active_mask);
}

// The simdgroup functions a split kernel calls directly (metal/loops.py, LoopGroup::lanes): one
// simdgroup's per-thread arrays, `on` its active lanes, `out` and each operand its 32 lanes' slots.
namespace lanes {
using simd_detail::ArrayLanes;
#define SHIMKIT_LANES_REDUCE(name, op)                                                              \
  template <class T> inline void name(const bool* on, T* out, const T* v) {                        \
    simd_detail::reduce_lanes<T, simd_detail::op>(ArrayLanes<T>{on, out, v});                       \
  }
SHIMKIT_LANES_REDUCE(simd_sum, plus)
SHIMKIT_LANES_REDUCE(simd_product, times)
SHIMKIT_LANES_REDUCE(simd_min, minimum)
SHIMKIT_LANES_REDUCE(simd_max, maximum)
SHIMKIT_LANES_REDUCE(simd_and, bit_and)
SHIMKIT_LANES_REDUCE(simd_or, bit_or)
SHIMKIT_LANES_REDUCE(simd_xor, bit_xor)
#undef SHIMKIT_LANES_REDUCE
#define SHIMKIT_LANES_PREFIX(name, op, inclusive, identity)                                          \
  template <class T> inline void name(const bool* on, T* out, const T* v) {                        \
    simd_detail::prefix_lanes<T, simd_detail::op, inclusive>(ArrayLanes<T>{on, out, v}, T(identity)); \
  }
SHIMKIT_LANES_PREFIX(simd_prefix_inclusive_sum, plus, true, 0)
SHIMKIT_LANES_PREFIX(simd_prefix_exclusive_sum, plus, false, 0)
SHIMKIT_LANES_PREFIX(simd_prefix_inclusive_product, times, true, 1)
SHIMKIT_LANES_PREFIX(simd_prefix_exclusive_product, times, false, 1)
#undef SHIMKIT_LANES_PREFIX
#define SHIMKIT_LANES_SHUFFLE(name, source)                                                         \
  template <class T, class A> inline void name(const bool* on, T* out, const T* v, const A* a) {   \
    simd_detail::shuffle_lanes<T, &simd_detail::source>(ArrayLanes<T, A>{on, out, v, a});           \
  }
SHIMKIT_LANES_SHUFFLE(simd_broadcast, source_at)
SHIMKIT_LANES_SHUFFLE(simd_shuffle, source_at)
SHIMKIT_LANES_SHUFFLE(simd_shuffle_down, source_down)
SHIMKIT_LANES_SHUFFLE(simd_shuffle_up, source_up)
SHIMKIT_LANES_SHUFFLE(simd_shuffle_xor, source_xor)
SHIMKIT_LANES_SHUFFLE(simd_shuffle_rotate_down, source_rotate_down)
SHIMKIT_LANES_SHUFFLE(simd_shuffle_rotate_up, source_rotate_up)
#undef SHIMKIT_LANES_SHUFFLE
template <class T> inline void simd_broadcast_first(const bool* on, T* out, const T* v) {
  simd_detail::broadcast_first_lanes<T>(ArrayLanes<T>{on, out, v});
}
// The lanes' votes as bits: a bit per active lane (`active`) and per active lane whose predicate holds.
inline void vote_bits(const bool* on, const bool* predicate, unsigned long& active, unsigned long& bits) {
  active = bits = 0;
  for (uint i = 0; i < shimkit_metal::kSimdWidth; ++i) {
    if (!on[i]) continue;  // an inactive lane's predicate was never written
    active |= 1ul << i;
    bits |= static_cast<unsigned long>(predicate[i]) << i;
  }
}
inline void simd_ballot(const bool* on, simd_vote* out, const bool* predicate) {
  unsigned long active, bits;
  vote_bits(on, predicate, active, bits);
  simd_vote vote(bits);
  vote.active = active;
  for (uint i = 0; i < shimkit_metal::kSimdWidth; ++i)
    if (on[i]) out[i] = vote;
}
// A full simdgroup's votes are read as four words (bools hold 0 or 1).
inline bool full_vote(const bool* on, const bool* predicate, bool all, bool& result) {
  if (!ArrayLanes<bool>{on, nullptr, nullptr}.full()) return false;
  unsigned long long words[shimkit_metal::kSimdWidth / 8];
  std::memcpy(words, predicate, sizeof(words));
  result = all ? (words[0] & words[1] & words[2] & words[3]) == shimkit_metal::kAllEight
               : (words[0] | words[1] | words[2] | words[3]) != 0;
  return true;
}
inline void simd_vote_to(const bool* on, bool* out, const bool* predicate, bool all) {
  bool result;
  if (full_vote(on, predicate, all, result)) {
    std::memset(out, result, shimkit_metal::kSimdWidth);
    return;
  }
  unsigned long active, bits;
  vote_bits(on, predicate, active, bits);
  result = all ? bits == active : bits != 0;
  for (uint i = 0; i < shimkit_metal::kSimdWidth; ++i)
    if (on[i]) out[i] = result;
}
inline void simd_any(const bool* on, bool* out, const bool* predicate) { simd_vote_to(on, out, predicate, false); }
inline void simd_all(const bool* on, bool* out, const bool* predicate) { simd_vote_to(on, out, predicate, true); }
}  // namespace lanes

// ---- atomics ----
enum memory_order { memory_order_relaxed = __ATOMIC_RELAXED, memory_order_seq_cst = __ATOMIC_SEQ_CST };

template <class T> struct _atomic {
  T value;
};
template <class T> using atomic = _atomic<T>;
using atomic_int = _atomic<int>;
using atomic_uint = _atomic<uint>;
using atomic_float = _atomic<float>;
using atomic_bool = _atomic<bool>;
using atomic_long = _atomic<long>;
using atomic_ulong = _atomic<ulong>;

template <class T> inline void atomic_store_explicit(_atomic<T>* a, T v, memory_order) {
  __atomic_store(&a->value, &v, __ATOMIC_SEQ_CST);
}
template <class T> inline T atomic_load_explicit(const _atomic<T>* a, memory_order) {
  T v;
  __atomic_load(&a->value, &v, __ATOMIC_SEQ_CST);
  return v;
}
template <class T> inline T atomic_exchange_explicit(_atomic<T>* a, T v, memory_order) {
  T old;
  __atomic_exchange(&a->value, &v, &old, __ATOMIC_SEQ_CST);
  return old;
}
template <class T>
inline bool atomic_compare_exchange_weak_explicit(_atomic<T>* a, T* expected, T desired, memory_order, memory_order) {
  return __atomic_compare_exchange(&a->value, expected, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
template <class T>
inline bool atomic_compare_exchange_strong_explicit(_atomic<T>* a, T* expected, T desired, memory_order, memory_order) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, memory_order_relaxed, memory_order_relaxed);
}
template <class T, class F> inline T atomic_update(_atomic<T>* a, F f) {
  T old;
  __atomic_load(&a->value, &old, __ATOMIC_SEQ_CST);
  T desired = f(old);
  while (!__atomic_compare_exchange(&a->value, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) desired = f(old);
  return old;
}
#define SHIMKIT_ATOMIC_FETCH(name, expr)                                                           \
  template <class T, class U> inline T atomic_fetch_##name##_explicit(_atomic<T>* a, U operand, memory_order) { \
    const T v = T(operand);                                                                         \
    return atomic_update(a, [v](T old) { return T(expr); });                                        \
  }
SHIMKIT_ATOMIC_FETCH(add, old + v)
SHIMKIT_ATOMIC_FETCH(sub, old - v)
SHIMKIT_ATOMIC_FETCH(and, old & v)
SHIMKIT_ATOMIC_FETCH(or, old | v)
SHIMKIT_ATOMIC_FETCH(xor, old ^ v)
SHIMKIT_ATOMIC_FETCH(min, v < old ? v : old)
SHIMKIT_ATOMIC_FETCH(max, old < v ? v : old)
#undef SHIMKIT_ATOMIC_FETCH

}  // namespace metal

// The combines of c10's threadgroup helpers over one simdgroup's lanes (loops.h, LoopGroup::threadgroup_reduce):
// c10::metal::simd_sum and simd_prod are Metal's, and its simd_max and simd_min for floating types give
// NaN to every lane where an active lane holds one (`simd_any(isnan(val))`).
namespace shimkit_metal::c10_lanes {
// `operator()(on, out, v)`: the lanes `on` of one simdgroup combined, into each active lane's `out`;
// `whole(v)`: all 32 lanes' combined value (the same bits).
template <class Op>
struct Fold {
  template <class T> void operator()(const bool* on, T* out, const T* v) const {
    ::metal::simd_detail::reduce_lanes<T, Op>(::metal::simd_detail::ArrayLanes<T>{on, out, v});
  }
  template <class T> T whole(const T* v) const {
    T lanes[kSimdWidth];
    std::memcpy(lanes, v, sizeof(lanes));
    return ::metal::simd_detail::fold_simdgroup<T, Op>(lanes);
  }
};
using Sum = Fold<::metal::simd_detail::plus>;
using Product = Fold<::metal::simd_detail::times>;
template <class Op>
struct NanPropagating : Fold<Op> {
  template <class T> void operator()(const bool* on, T* out, const T* v) const {
    if constexpr (std::is_floating_point_v<T>) {
      // A whole simdgroup's test is one vector loop (GCC keeps a loop that also reads `on` scalar).
      int nan = 0;
      if (::metal::simd_detail::ArrayLanes<T>{on, out, v}.full()) {
        nan = any_nan(v);
      } else {
        for (uint i = 0; i < kSimdWidth; ++i) nan |= on[i] && v[i] != v[i];
      }
      if (nan) {
        for (uint i = 0; i < kSimdWidth; ++i)
          if (on[i]) out[i] = ::metal::numeric_limits<T>::quiet_NaN();
        return;
      }
    }
    Fold<Op>::operator()(on, out, v);
  }
  template <class T> T whole(const T* v) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (any_nan(v)) return ::metal::numeric_limits<T>::quiet_NaN();
    }
    return Fold<Op>::whole(v);
  }

 private:
  template <class T> static int any_nan(const T* v) {
    int nan = 0;
    for (uint i = 0; i < kSimdWidth; ++i) nan |= v[i] != v[i];
    return nan;
  }
};
using Max = NanPropagating<::metal::simd_detail::maximum>;
using Min = NanPropagating<::metal::simd_detail::minimum>;
// c10's simd_argmax / simd_argmin of (value, index): the lanes' extreme as above, and the index of the
// first lane holding it or a NaN (`simd_ballot(val == rc || isnan(val))`, its lowest bit broadcast).
template <class Extreme>
struct Arg {
  template <class T, class I> void operator()(const bool* on, const T* v, const I* index, T& value, I& at) const {
    T out[kSimdWidth];
    Extreme()(on, out, v);
    uint lane = 0;
    while (!on[lane]) ++lane;  // the combine runs for a simdgroup with an active lane
    value = out[lane];
    at = first_holding(on, v, index, value, lane);
  }
  template <class T, class I> void whole(const T* v, const I* index, T& value, I& at) const {
    bool on[kSimdWidth];
    std::memset(on, 1, sizeof(on));
    value = Extreme().whole(v);
    at = first_holding(on, v, index, value, 0);
  }

 private:
  template <class T, class I> static I first_holding(const bool* on, const T* v, const I* index, T value, uint from) {
    for (uint i = from; i < kSimdWidth; ++i)
      if (on[i] && (v[i] == value || v[i] != v[i])) return index[i];
    return index[from];
  }
};
using ArgMax = Arg<Max>;
using ArgMin = Arg<Min>;
}  // namespace shimkit_metal::c10_lanes
