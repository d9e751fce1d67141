// Metal's math and common functions (<metal_math>, <metal_common>, <metal_relational>, <metal_integer>)
// over scalars and vectors: only those Metal has (no log1p, expm1 or erf, which c10 defines itself).
// Floating functions compute in float (double is not a Metal type) and round
// half/bfloat results once; precise:: and fast:: name the same functions, since the CPU has one
// precision (fast:: may be less exact on a GPU, never more).
#pragma once

#include "types.h"

namespace metal {

namespace detail {
template <class T> using math_t = float;
template <class T, class F> inline T map1(const T& a, F f) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = map1(a.v[i], f);
    return r;
  } else {
    return T(f(static_cast<math_t<T>>(a)));
  }
}
template <class T, class F> inline T map2(const T& a, const T& b, F f) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = map2(a.v[i], b.v[i], f);
    return r;
  } else {
    return T(f(static_cast<math_t<T>>(a), static_cast<math_t<T>>(b)));
  }
}
template <class T, class F> inline T map3(const T& a, const T& b, const T& c, F f) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = map3(a.v[i], b.v[i], c.v[i], f);
    return r;
  } else {
    return T(f(static_cast<math_t<T>>(a), static_cast<math_t<T>>(b), static_cast<math_t<T>>(c)));
  }
}
template <class T, class F> inline auto test1(const T& a, F f) {
  if constexpr (is_vector_v<T>) {
    vec<bool, T::size> r;
    for (int i = 0; i < T::size; ++i) r.v[i] = f(static_cast<float>(a.v[i]));
    return r;
  } else {
    return static_cast<bool>(f(static_cast<math_t<T>>(a)));
  }
}
template <class T> using float_t_of = std::enable_if_t<is_floating_point_v<T>, T>;
}  // namespace detail

// Overloads per floating type, as Metal declares them (so `pow(2, x)` converts the 2), plus vectors.
#define SHIMKIT_FLOAT_UNARY(name, expr)                                                           \
  inline float name(float a) { return detail::map1(a, [](auto x) { return expr; }); }               \
  inline half name(half a) { return detail::map1(a, [](auto x) { return expr; }); }                 \
  inline bfloat name(bfloat a) { return detail::map1(a, [](auto x) { return expr; }); }             \
  template <class T, int N, bool P> inline vec<T, N> name(const vec<T, N, P>& a) {                  \
    return detail::map1(vec<T, N>(a), [](auto x) { return expr; });                                 \
  }
SHIMKIT_FLOAT_UNARY(exp, __builtin_expf(x))
SHIMKIT_FLOAT_UNARY(exp2, __builtin_exp2f(x))
SHIMKIT_FLOAT_UNARY(exp10, __builtin_powf(decltype(x)(10), x))
SHIMKIT_FLOAT_UNARY(log, __builtin_logf(x))
SHIMKIT_FLOAT_UNARY(log2, __builtin_log2f(x))
SHIMKIT_FLOAT_UNARY(log10, __builtin_log10f(x))
SHIMKIT_FLOAT_UNARY(sqrt, __builtin_sqrtf(x))
SHIMKIT_FLOAT_UNARY(rsqrt, 1 / __builtin_sqrtf(x))
SHIMKIT_FLOAT_UNARY(sin, __builtin_sinf(x))
SHIMKIT_FLOAT_UNARY(cos, __builtin_cosf(x))
SHIMKIT_FLOAT_UNARY(tan, __builtin_tanf(x))
SHIMKIT_FLOAT_UNARY(asin, __builtin_asinf(x))
SHIMKIT_FLOAT_UNARY(acos, __builtin_acosf(x))
SHIMKIT_FLOAT_UNARY(atan, __builtin_atanf(x))
SHIMKIT_FLOAT_UNARY(sinh, __builtin_sinhf(x))
SHIMKIT_FLOAT_UNARY(cosh, __builtin_coshf(x))
SHIMKIT_FLOAT_UNARY(tanh, __builtin_tanhf(x))
SHIMKIT_FLOAT_UNARY(asinh, __builtin_asinhf(x))
SHIMKIT_FLOAT_UNARY(acosh, __builtin_acoshf(x))
SHIMKIT_FLOAT_UNARY(atanh, __builtin_atanhf(x))
SHIMKIT_FLOAT_UNARY(sinpi, __builtin_sinf(x * 3.14159265358979323846f))
SHIMKIT_FLOAT_UNARY(cospi, __builtin_cosf(x * 3.14159265358979323846f))
SHIMKIT_FLOAT_UNARY(tanpi, __builtin_tanf(x * 3.14159265358979323846f))
SHIMKIT_FLOAT_UNARY(floor, __builtin_floorf(x))
SHIMKIT_FLOAT_UNARY(ceil, __builtin_ceilf(x))
SHIMKIT_FLOAT_UNARY(trunc, __builtin_truncf(x))
SHIMKIT_FLOAT_UNARY(round, __builtin_roundf(x))
SHIMKIT_FLOAT_UNARY(rint, __builtin_nearbyintf(x))
SHIMKIT_FLOAT_UNARY(fabs, __builtin_fabsf(x))
SHIMKIT_FLOAT_UNARY(fract, __builtin_fminf(x - __builtin_floorf(x), decltype(x)(0x1.fffffep-1)))
SHIMKIT_FLOAT_UNARY(saturate, __builtin_fminf(__builtin_fmaxf(x, decltype(x)(0)), decltype(x)(1)))
SHIMKIT_FLOAT_UNARY(sign, (x > 0 ? decltype(x)(1) : x < 0 ? decltype(x)(-1) : x == x ? decltype(x)(0) : x))
#undef SHIMKIT_FLOAT_UNARY

#define SHIMKIT_FLOAT_BINARY(name, expr)                                                          \
  inline float name(float a, float b) { return detail::map2(a, b, [](auto x, auto y) { return expr; }); } \
  inline half name(half a, half b) { return detail::map2(a, b, [](auto x, auto y) { return expr; }); }     \
  inline bfloat name(bfloat a, bfloat b) {                                                          \
    return detail::map2(a, b, [](auto x, auto y) { return expr; });                                 \
  }                                                                                                 \
  template <class T, int N, bool P, bool Q>                                                         \
  inline vec<T, N> name(const vec<T, N, P>& a, const vec<T, N, Q>& b) {                             \
    return detail::map2(vec<T, N>(a), vec<T, N>(b), [](auto x, auto y) { return expr; });           \
  }
SHIMKIT_FLOAT_BINARY(pow, __builtin_powf(x, y))
SHIMKIT_FLOAT_BINARY(powr, __builtin_powf(x, y))
SHIMKIT_FLOAT_BINARY(atan2, __builtin_atan2f(x, y))
SHIMKIT_FLOAT_BINARY(fmod, __builtin_fmodf(x, y))
SHIMKIT_FLOAT_BINARY(fmax, __builtin_fmaxf(x, y))
SHIMKIT_FLOAT_BINARY(fmin, __builtin_fminf(x, y))
SHIMKIT_FLOAT_BINARY(copysign, __builtin_copysignf(x, y))
SHIMKIT_FLOAT_BINARY(fdim, __builtin_fdimf(x, y))
SHIMKIT_FLOAT_BINARY(step, (y < x ? decltype(x)(0) : decltype(x)(1)))
SHIMKIT_FLOAT_BINARY(nextafter, __builtin_nextafterf(x, y))
#undef SHIMKIT_FLOAT_BINARY

template <class T> inline detail::float_t_of<T> fma(const T& a, const T& b, const T& c) {
  return detail::map3(a, b, c, [](auto x, auto y, auto z) { return __builtin_fmaf(x, y, z); });
}
template <class T> inline detail::float_t_of<T> mix(const T& a, const T& b, const T& t) {
  return detail::map3(a, b, t, [](auto x, auto y, auto s) { return x + (y - x) * s; });
}
template <class T> inline T sincos(const T& a, T& cosine) {
  cosine = cos(a);
  return sin(a);
}
template <class T> inline T ldexp(const T& a, int e) { return detail::map1(a, [e](auto x) { return __builtin_ldexpf(x, e); }); }
template <class T> inline T frexp(const T& a, int& e) { return T(__builtin_frexpf(float(a), &e)); }
template <class T> inline T modf(const T& a, T& whole) {
  float w;
  T r = T(__builtin_modff(float(a), &w));
  whole = T(w);
  return r;
}

template <class T> inline T divide(const T& a, const T& b) { return a / b; }

// isnan/isinf/isfinite/signbit: scalar bool or a bool vector.
template <class T> inline auto isnan(const T& a) { return detail::test1(a, [](auto x) { return x != x; }); }
template <class T> inline auto isinf(const T& a) { return detail::test1(a, [](auto x) { return __builtin_isinf(x); }); }
template <class T> inline auto isfinite(const T& a) { return detail::test1(a, [](auto x) { return __builtin_isfinite(x); }); }
template <class T> inline auto isnormal(const T& a) { return detail::test1(a, [](auto x) { return __builtin_isnormal(x); }); }
template <class T> inline auto signbit(const T& a) { return detail::test1(a, [](auto x) { return __builtin_signbit(x); }); }
template <class T> inline auto isunordered(const T& a, const T& b) { return isnan(a) || isnan(b); }
template <class T, int N, bool P> inline vec<bool, N> isunordered(const vec<T, N, P>& a, const vec<T, N, P>& b) {
  return isnan(a) || isnan(b);
}

// abs, min, max, clamp for integers and floats (Metal's fmin/fmax semantics for floats: a NaN operand
// yields the other one).
template <class T> inline T abs(const T& a) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = abs(a.v[i]);
    return r;
  } else if constexpr (is_floating_point_v<T>) {
    return T(__builtin_fabsf(float(a)));
  } else if constexpr (std::is_signed_v<T>) {
    return a < 0 ? T(-a) : a;
  } else {
    return a;
  }
}
namespace detail {
// fmax / fmin without a call into libm (which the compiler makes for __builtin_fmaxf without
// -ffinite-math-only): `a` where it wins, `b` otherwise, unless `b` is NaN. A blend of the bits, because
// GCC made `(a_wins || b != b) ? a : b` a branch wherever it did not vectorise it (a simdgroup's last two
// folds of simd_max), taken at random on random data: Inductor's row max 3.1 -> 2.4 ms per 1M threads.
inline float select_number(bool a_wins, float a, float b) {
  const std::uint32_t take_a = 0u - static_cast<std::uint32_t>(a_wins | (b != b));
  std::uint32_t x, y;
  std::memcpy(&x, &a, sizeof(x));
  std::memcpy(&y, &b, sizeof(y));
  const std::uint32_t bits = (x & take_a) | (y & ~take_a);
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}
}  // namespace detail
template <class T> inline T max(const T& a, const T& b) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = max(a.v[i], b.v[i]);
    return r;
  } else if constexpr (is_floating_point_v<T>) {
    return T(detail::select_number(float(a) > float(b), float(a), float(b)));
  } else {
    return a < b ? b : a;
  }
}
template <class T> inline T min(const T& a, const T& b) {
  if constexpr (is_vector_v<T>) {
    T r;
    for (int i = 0; i < T::size; ++i) r.v[i] = min(a.v[i], b.v[i]);
    return r;
  } else if constexpr (is_floating_point_v<T>) {
    return T(detail::select_number(float(a) < float(b), float(a), float(b)));
  } else {
    return b < a ? b : a;
  }
}
template <class T, int N, bool P, class S, class = std::enable_if_t<!is_vector_v<S>>>
inline vec<T, N> max(const vec<T, N, P>& a, const S& b) { return max(vec<T, N>(a), vec<T, N>(T(b))); }
template <class T, int N, bool P, class S, class = std::enable_if_t<!is_vector_v<S>>>
inline vec<T, N> min(const vec<T, N, P>& a, const S& b) { return min(vec<T, N>(a), vec<T, N>(T(b))); }
template <class T> inline T max3(const T& a, const T& b, const T& c) { return max(max(a, b), c); }
template <class T> inline T min3(const T& a, const T& b, const T& c) { return min(min(a, b), c); }
template <class T> inline T median3(const T& a, const T& b, const T& c) { return max(min(a, b), min(max(a, b), c)); }
template <class T, class L, class H> inline T clamp(const T& x, const L& lo, const H& hi) {
  return min(max(x, T(lo)), T(hi));
}

template <class T> inline T select(const T& a, const T& b, bool c) { return c ? b : a; }
template <class T, int N, bool P, bool Q>
inline vec<T, N> select(const vec<T, N, P>& a, const vec<T, N, P>& b, const vec<bool, N, Q>& c) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.v[i] = c.v[i] ? b.v[i] : a.v[i];
  return r;
}
template <int N, bool P> inline bool all(const vec<bool, N, P>& v) {
  for (int i = 0; i < N; ++i)
    if (!v.v[i]) return false;
  return true;
}
template <int N, bool P> inline bool any(const vec<bool, N, P>& v) {
  for (int i = 0; i < N; ++i)
    if (v.v[i]) return true;
  return false;
}
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }

// Geometric functions.
template <class T, int N, bool P> inline T dot(const vec<T, N, P>& a, const vec<T, N, P>& b) {
  float s = 0;
  for (int i = 0; i < N; ++i) s += float(a.v[i]) * float(b.v[i]);
  return T(s);
}
template <class T, int N, bool P> inline T length(const vec<T, N, P>& a) { return T(__builtin_sqrtf(float(dot(a, a)))); }
template <class T, int N, bool P> inline T length_squared(const vec<T, N, P>& a) { return dot(a, a); }
template <class T, int N, bool P> inline vec<T, N> normalize(const vec<T, N, P>& a) { return a / length(a); }
template <class T, int N, bool P> inline T distance(const vec<T, N, P>& a, const vec<T, N, P>& b) { return length(a - b); }
template <class T, bool P> inline vec<T, 3> cross(const vec<T, 3, P>& a, const vec<T, 3, P>& b) {
  return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// Integer functions.
template <class T> inline T popcount(T x) { return T(__builtin_popcountll(static_cast<unsigned long long>(make_unsigned_t<T>(x)))); }
template <class T> inline T clz(T x) {
  using U = make_unsigned_t<T>;
  U u = U(x);
  return u == 0 ? T(sizeof(T) * 8) : T(__builtin_clzll(u) - (64 - sizeof(T) * 8));
}
template <class T> inline T ctz(T x) {
  using U = make_unsigned_t<T>;
  U u = U(x);
  return u == 0 ? T(sizeof(T) * 8) : T(__builtin_ctzll(u));
}
template <class T> inline T mulhi(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    return T((W(a) * W(b)) >> 64);
  } else {
    using W = std::conditional_t<std::is_signed_v<T>, long, unsigned long>;
    return T((W(a) * W(b)) >> (sizeof(T) * 8));
  }
}
template <class T> inline T rotate(T v, T n) {
  using U = make_unsigned_t<T>;
  constexpr unsigned bits = sizeof(T) * 8;
  U u = U(v);
  unsigned s = unsigned(U(n)) % bits;
  return T(s == 0 ? u : U((u << s) | (u >> (bits - s))));
}
template <class T> inline T reverse_bits(T v) {
  using U = make_unsigned_t<T>;
  U u = U(v), r = 0;
  for (unsigned i = 0; i < sizeof(T) * 8; ++i) r = U((r << 1) | ((u >> i) & 1));
  return T(r);
}

namespace precise {
using metal::acos; using metal::acosh; using metal::asin; using metal::asinh; using metal::atan;
using metal::atan2; using metal::atanh; using metal::ceil; using metal::copysign; using metal::cos;
using metal::cosh; using metal::cospi; using metal::exp; using metal::exp10; using metal::exp2;
using metal::fabs; using metal::floor; using metal::fma; using metal::fmax; using metal::fmin;
using metal::fmod; using metal::fract; using metal::log; using metal::log10; using metal::log2;
using metal::max; using metal::min; using metal::pow; using metal::powr; using metal::rint;
using metal::round; using metal::rsqrt; using metal::sin; using metal::sinh; using metal::sinpi;
using metal::sqrt; using metal::tan; using metal::tanh; using metal::tanpi; using metal::trunc;
using metal::clamp; using metal::abs; using metal::divide; using metal::sincos;
using metal::sign; using metal::fdim;
}  // namespace precise
namespace fast {
using namespace precise;
}  // namespace fast

}  // namespace metal
