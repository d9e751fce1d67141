// Metal Shading Language scalar and vector types, as C++ (shimkit.metal runs MSL kernels on the CPU).
//
// half is IEEE binary16 (_Float16: every operation rounds to half, as Metal's half arithmetic does);
// bfloat is a struct whose arithmetic is done in float and rounded to nearest-even once per operation.
// Vectors have Metal's sizes and alignments (a 3-vector occupies 4 elements; packed_ vectors do not).
#pragma once

// No <cmath>: it declares libc's math functions globally (expm1f ...), which MSL code may define
// itself (c10's expm1f.h does); the math here uses the compiler's __builtin_ functions instead.
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

// The types live in their own namespace, re-exported into `metal`: in MSL they are built-in types, so
// argument-dependent lookup must not find metal's functions through them (c10's own simd_max(bfloat)
// would otherwise be ambiguous with metal::simd_max).
namespace shimkit_msl {

using half = _Float16;
using uint = unsigned int;
using ushort = unsigned short;
using uchar = unsigned char;
using ulong = unsigned long;
using size_t = unsigned long;
using ptrdiff_t = long;
template <class T, size_t N> using array = std::array<T, N>;

struct bfloat {
  uint16_t bits;
  bfloat() = default;
  static bfloat from_bits(uint16_t b) {
    bfloat r;
    r.bits = b;
    return r;
  }
  // Round to nearest even; NaN stays a (quiet) NaN.
  static uint16_t round_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T> || std::is_same_v<T, half>>>
  bfloat(T value) : bits(round_bits(static_cast<float>(value))) {}
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  bfloat& operator+=(bfloat o) { return *this = bfloat(float(*this) + float(o)); }
  bfloat& operator-=(bfloat o) { return *this = bfloat(float(*this) - float(o)); }
  bfloat& operator*=(bfloat o) { return *this = bfloat(float(*this) * float(o)); }
  bfloat& operator/=(bfloat o) { return *this = bfloat(float(*this) / float(o)); }
  bfloat operator-() const { return from_bits(bits ^ 0x8000); }
  bfloat operator+() const { return *this; }
};

#define SHIMKIT_BFLOAT_BINARY(op)                                                              \
  inline bfloat operator op(bfloat a, bfloat b) { return bfloat(float(a) op float(b)); }        \
  template <class T, class = std::enable_if_t<std::is_integral_v<T>>>                           \
  inline bfloat operator op(bfloat a, T b) { return bfloat(float(a) op float(b)); }             \
  template <class T, class = std::enable_if_t<std::is_integral_v<T>>>                           \
  inline bfloat operator op(T a, bfloat b) { return bfloat(float(a) op float(b)); }             \
  inline float operator op(bfloat a, float b) { return float(a) op b; }                         \
  inline float operator op(float a, bfloat b) { return a op float(b); }
SHIMKIT_BFLOAT_BINARY(+)
SHIMKIT_BFLOAT_BINARY(-)
SHIMKIT_BFLOAT_BINARY(*)
SHIMKIT_BFLOAT_BINARY(/)
#undef SHIMKIT_BFLOAT_BINARY
#define SHIMKIT_BFLOAT_COMPARE(op)                                                             \
  inline bool operator op(bfloat a, bfloat b) { return float(a) op float(b); }                  \
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>                         \
  inline bool operator op(bfloat a, T b) { return float(a) op b; }                              \
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>                         \
  inline bool operator op(T a, bfloat b) { return a op float(b); }
SHIMKIT_BFLOAT_COMPARE(==)
SHIMKIT_BFLOAT_COMPARE(!=)
SHIMKIT_BFLOAT_COMPARE(<)
SHIMKIT_BFLOAT_COMPARE(<=)
SHIMKIT_BFLOAT_COMPARE(>)
SHIMKIT_BFLOAT_COMPARE(>=)
#undef SHIMKIT_BFLOAT_COMPARE

// ---- type traits (Metal's <metal_type_traits>) ----
template <class T> struct is_floating_point : std::is_floating_point<T> {};
template <> struct is_floating_point<half> : std::true_type {};
template <> struct is_floating_point<bfloat> : std::true_type {};

template <class T, int N, bool Packed = false> struct vec;

template <class T> struct is_vector : std::false_type {};
template <class T, int N, bool P> struct is_vector<vec<T, N, P>> : std::true_type {};
template <class T> struct scalar_of { using type = T; };
template <class T, int N, bool P> struct scalar_of<vec<T, N, P>> { using type = T; };

template <class T> struct remove_address_space { using type = T; };
using std::conditional_t;
using std::decay_t;
using std::declval;
using std::enable_if_t;
using std::is_same;
using std::is_same_v;
using std::remove_const_t;
using std::remove_cv_t;
using std::remove_reference_t;
template <class T> constexpr bool is_vector_v = is_vector<T>::value;
template <class T> constexpr bool is_scalar_v = !is_vector_v<T>;
template <class T> constexpr bool is_floating_point_v = is_floating_point<typename scalar_of<T>::type>::value;
template <class T> constexpr bool is_integral_v = std::is_integral_v<typename scalar_of<T>::type>;
template <class T> constexpr bool is_arithmetic_v = is_floating_point_v<T> || is_integral_v<T>;
template <class T> constexpr bool is_signed_v =
    std::is_signed_v<typename scalar_of<T>::type> || is_floating_point_v<T>;
template <class T> constexpr bool is_unsigned_v = std::is_unsigned_v<typename scalar_of<T>::type>;
template <class T> constexpr bool is_pointer_v = std::is_pointer_v<T>;
template <class T> using make_unsigned_t = std::make_unsigned_t<T>;
template <class T> using make_signed_t = std::make_signed_t<T>;
template <class T> struct vec_elements : std::integral_constant<int, 1> {};
template <class T, int N, bool P> struct vec_elements<vec<T, N, P>> : std::integral_constant<int, N> {};

template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static half min() { return half(6.103515625e-05f); }
  static half max() { return half(65504.0f); }
  static half lowest() { return half(-65504.0f); }
  static half epsilon() { return half(0.0009765625f); }
  static half infinity() { return half(__builtin_inff()); }
  static half quiet_NaN() { return half(__builtin_nanf("")); }
  static half denorm_min() { return half(5.960464477539063e-08f); }
};
template <> struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static bfloat min() { return bfloat::from_bits(0x0080); }
  static bfloat max() { return bfloat::from_bits(0x7f7f); }
  static bfloat lowest() { return bfloat::from_bits(0xff7f); }
  static bfloat epsilon() { return bfloat::from_bits(0x3c00); }
  static bfloat infinity() { return bfloat::from_bits(0x7f80); }
  static bfloat quiet_NaN() { return bfloat::from_bits(0x7fc0); }
  static bfloat denorm_min() { return bfloat::from_bits(0x0001); }
};

// ---- vectors ----
template <class T, int N, bool P> struct vec_storage;
template <class T, bool P> struct vec_storage<T, 2, P> {
  union { T v[2]; struct { T x, y; }; struct { T r, g; }; };
};
template <class T> struct alignas(sizeof(T) * 4) vec_storage<T, 3, false> {
  union { T v[4]; struct { T x, y, z; }; struct { T r, g, b; }; };
};
template <class T> struct vec_storage<T, 3, true> {
  union { T v[3]; struct { T x, y, z; }; struct { T r, g, b; }; };
};
template <class T, bool P> struct vec_storage<T, 4, P> {
  union { T v[4]; struct { T x, y, z, w; }; struct { T r, g, b, a; }; };
};
// Unpacked 2- and 4-vectors are aligned to their size, as in Metal.
template <class T, int N, bool P> struct vec_align { static constexpr size_t value = alignof(T); };
template <class T> struct vec_align<T, 2, false> { static constexpr size_t value = sizeof(T) * 2; };
template <class T> struct vec_align<T, 4, false> { static constexpr size_t value = sizeof(T) * 4; };
template <class T> struct vec_align<T, 3, false> { static constexpr size_t value = sizeof(T) * 4; };

template <class V, int... I> struct swizzle;

template <class T, int N, bool P>
struct alignas(vec_align<T, N, P>::value) vec : vec_storage<T, N, P> {
  using element_type = T;
  static constexpr int size = N;
  vec() = default;
  template <class U, class = std::enable_if_t<!is_vector_v<U> && std::is_convertible_v<U, T>>>
  constexpr vec(U s) {
    for (int i = 0; i < N; ++i) this->v[i] = T(s);
  }
  template <class U, bool Q>
  constexpr explicit vec(const vec<U, N, Q>& o) {
    for (int i = 0; i < N; ++i) this->v[i] = T(o.v[i]);
  }
  template <bool Q, class = std::enable_if_t<Q != P>>
  constexpr vec(const vec<T, N, Q>& o) {
    for (int i = 0; i < N; ++i) this->v[i] = o.v[i];
  }
  template <class A, class B, class... Rest,
            class = std::enable_if_t<(vec_elements<std::decay_t<A>>::value + vec_elements<std::decay_t<B>>::value +
                                      (0 + ... + vec_elements<std::decay_t<Rest>>::value)) == N>>
  constexpr vec(const A& a, const B& b, const Rest&... rest) {
    int at = 0;
    put(at, a);
    put(at, b);
    (put(at, rest), ...);
  }
  T& operator[](long i) { return this->v[i]; }
  const T& operator[](long i) const { return this->v[i]; }
  template <int... I> swizzle<vec, I...> sw() { return swizzle<vec, I...>(*this); }
  template <int... I> vec<T, sizeof...(I)> sw() const { return vec<T, sizeof...(I)>(this->v[I]...); }

 private:
  template <class U> constexpr void put(int& at, const U& u) {
    if constexpr (is_vector_v<U>) {
      for (int i = 0; i < vec_elements<U>::value; ++i) this->v[at++] = T(u.v[i]);
    } else {
      this->v[at++] = T(u);
    }
  }
};

// A swizzle is a copy of the selected components that also writes back through assignment, so
// `auto a = v.xy` is a value while `v.xy = w` and `v.xy += w` update v.
template <class V, int... I>
struct swizzle : vec<typename V::element_type, sizeof...(I)> {
  using base = vec<typename V::element_type, sizeof...(I)>;
  V* target;
  explicit swizzle(V& v) : base(v.v[I]...), target(&v) {}
  swizzle& operator=(const base& value) {
    int k = 0;
    ((target->v[I] = value.v[k++]), ...);
    static_cast<base&>(*this) = value;
    return *this;
  }
  swizzle& operator=(const swizzle& other) { return *this = static_cast<const base&>(other); }
  template <class U> swizzle& operator+=(const U& u) { return *this = base(*this) + u; }
  template <class U> swizzle& operator-=(const U& u) { return *this = base(*this) - u; }
  template <class U> swizzle& operator*=(const U& u) { return *this = base(*this) * u; }
  template <class U> swizzle& operator/=(const U& u) { return *this = base(*this) / u; }
};

#define SHIMKIT_VEC_BINARY(op, R)                                                                    \
  template <class T, int N, bool P, bool Q>                                                          \
  inline vec<R, N> operator op(const vec<T, N, P>& a, const vec<T, N, Q>& b) {                       \
    vec<R, N> r;                                                                                     \
    for (int i = 0; i < N; ++i) r.v[i] = a.v[i] op b.v[i];                                           \
    return r;                                                                                        \
  }                                                                                                  \
  template <class T, int N, bool P, class S, class = std::enable_if_t<!is_vector_v<S>>>              \
  inline vec<R, N> operator op(const vec<T, N, P>& a, const S& s) {                                  \
    vec<R, N> r;                                                                                     \
    for (int i = 0; i < N; ++i) r.v[i] = a.v[i] op T(s);                                             \
    return r;                                                                                        \
  }                                                                                                  \
  template <class T, int N, bool P, class S, class = std::enable_if_t<!is_vector_v<S>>>              \
  inline vec<R, N> operator op(const S& s, const vec<T, N, P>& a) {                                  \
    vec<R, N> r;                                                                                     \
    for (int i = 0; i < N; ++i) r.v[i] = T(s) op a.v[i];                                             \
    return r;                                                                                        \
  }
SHIMKIT_VEC_BINARY(+, T)
SHIMKIT_VEC_BINARY(-, T)
SHIMKIT_VEC_BINARY(*, T)
SHIMKIT_VEC_BINARY(/, T)
SHIMKIT_VEC_BINARY(%, T)
SHIMKIT_VEC_BINARY(&, T)
SHIMKIT_VEC_BINARY(|, T)
SHIMKIT_VEC_BINARY(^, T)
SHIMKIT_VEC_BINARY(<<, T)
SHIMKIT_VEC_BINARY(>>, T)
SHIMKIT_VEC_BINARY(==, bool)
SHIMKIT_VEC_BINARY(!=, bool)
SHIMKIT_VEC_BINARY(<, bool)
SHIMKIT_VEC_BINARY(<=, bool)
SHIMKIT_VEC_BINARY(>, bool)
SHIMKIT_VEC_BINARY(>=, bool)
SHIMKIT_VEC_BINARY(&&, bool)
SHIMKIT_VEC_BINARY(||, bool)
#undef SHIMKIT_VEC_BINARY

#define SHIMKIT_VEC_ASSIGN(op)                                                                       \
  template <class T, int N, bool P, class U>                                                         \
  inline vec<T, N, P>& operator op##=(vec<T, N, P>& a, const U& b) {                                 \
    vec<T, N> r = a op b;                                                                            \
    for (int i = 0; i < N; ++i) a.v[i] = r.v[i];                                                     \
    return a;                                                                                        \
  }
SHIMKIT_VEC_ASSIGN(+)
SHIMKIT_VEC_ASSIGN(-)
SHIMKIT_VEC_ASSIGN(*)
SHIMKIT_VEC_ASSIGN(/)
SHIMKIT_VEC_ASSIGN(%)
SHIMKIT_VEC_ASSIGN(&)
SHIMKIT_VEC_ASSIGN(|)
SHIMKIT_VEC_ASSIGN(^)
SHIMKIT_VEC_ASSIGN(<<)
SHIMKIT_VEC_ASSIGN(>>)
#undef SHIMKIT_VEC_ASSIGN

template <class T, int N, bool P> inline vec<T, N> operator-(const vec<T, N, P>& a) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.v[i] = -a.v[i];
  return r;
}
template <class T, int N, bool P> inline vec<T, N> operator+(const vec<T, N, P>& a) { return a; }
template <class T, int N, bool P> inline vec<T, N> operator~(const vec<T, N, P>& a) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r.v[i] = ~a.v[i];
  return r;
}
template <class T, int N, bool P> inline vec<bool, N> operator!(const vec<T, N, P>& a) {
  vec<bool, N> r;
  for (int i = 0; i < N; ++i) r.v[i] = !a.v[i];
  return r;
}

#define SHIMKIT_VEC_NAMES(T, name)                                                                   \
  using name##2 = vec<T, 2>;                                                                         \
  using name##3 = vec<T, 3>;                                                                         \
  using name##4 = vec<T, 4>;                                                                         \
  using packed_##name##2 = vec<T, 2, true>;                                                          \
  using packed_##name##3 = vec<T, 3, true>;                                                          \
  using packed_##name##4 = vec<T, 4, true>;
SHIMKIT_VEC_NAMES(float, float)
SHIMKIT_VEC_NAMES(half, half)
SHIMKIT_VEC_NAMES(bfloat, bfloat)
SHIMKIT_VEC_NAMES(int, int)
SHIMKIT_VEC_NAMES(uint, uint)
SHIMKIT_VEC_NAMES(short, short)
SHIMKIT_VEC_NAMES(ushort, ushort)
SHIMKIT_VEC_NAMES(char, char)
SHIMKIT_VEC_NAMES(uchar, uchar)
SHIMKIT_VEC_NAMES(long, long)
SHIMKIT_VEC_NAMES(ulong, ulong)
SHIMKIT_VEC_NAMES(bool, bool)
#undef SHIMKIT_VEC_NAMES

template <class T, class U>
inline T as_type(const U& u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: source and destination types must have the same size");
  T t;
  std::memcpy(static_cast<void*>(&t), static_cast<const void*>(&u), sizeof(T));
  return t;
}

}  // namespace shimkit_msl

namespace metal {
using namespace shimkit_msl;
}  // namespace metal
