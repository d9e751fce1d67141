// The SDK's matrix product (shimkit/matrix_product.h): Goto's blocking (a block of the right operand packed into
// column panels that stay in the L1 cache, a block of the left one packed into row panels in L2) around a register
// tile of MR rows by NV vectors of columns. The tile keeps MR x NV accumulators in registers and, for each step of
// k, broadcasts one element of each row and multiplies it into the column vectors: every accumulator lane is one
// result element summed over k in order, so the vectors change how many elements advance at once, never the sum.
//
// Each term is one fused multiply-add (rounded once), as a GPU's matrix multiply-accumulate computes. The tile is
// compiled for AVX-512, for AVX2 with FMA and for any CPU (std::fma), and the widest the CPU runs is chosen:
// the same operations on every host, so the same bits.
#include "shimkit/matrix_product.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // the vector types never cross a call the tile is compiled apart from

// The x86 tiles are GCC's: clang (the Objective-C++ builds here, a Mac) refuses a vector argument in the tile template,
// which has no target attribute of its own, where GCC inlines it into the block that has one. There, and on any
// other CPU, the portable tile runs: the same bits, slower.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SHIMKIT_X86_TILES 1
#include <immintrin.h>
#else
#define SHIMKIT_X86_TILES 0
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace shimkit {
namespace {

// Element `offset` of a buffer of `kType`, as float.
template <DType kType>
inline float element(const void* data, int64_t offset) {
  if constexpr (kType == DType::kFloat32) {
    return static_cast<const float*>(data)[offset];
  } else if constexpr (kType == DType::kBFloat16) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(data)[offset]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  } else {
    return half_bits_to_float(static_cast<const uint16_t*>(data)[offset]);
  }
}

// The blocking of one instruction set: MR rows by NR = NV * kLanes columns in registers, KC steps of k per packed
// block (a KC x NR column panel stays in L1), MC rows per packed left block (in L2), NC columns per packed right
// block.
struct Blocking {
  int64_t mr, nr, kc, mc, nc;
};

// A packed block of the right operand: rows [p0, p0 + kc) and columns [j0, j0 + nc) of matrix `batch`, as
// ceil(nc / nr) panels of kc x nr, row-major within a panel, zero past column nc.
template <DType kType>
void pack_right(const MatrixOperand& rhs, int64_t batch, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                int64_t nr, float* packed) {
  const int64_t panels = (nc + nr - 1) / nr;
  const int64_t rs = rhs.row_stride, cs = rhs.column_stride;
  const int64_t base = batch * rhs.batch_stride + p0 * rs + j0 * cs;
  for (int64_t panel = 0; panel < panels; ++panel) {
    float* out = packed + panel * kc * nr;
    const int64_t columns = std::min(nr, nc - panel * nr);
    const int64_t first = base + panel * nr * cs;
    if (columns < nr) std::fill(out, out + kc * nr, 0.0f);
    if (cs == 1) {  // along the operand's rows
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t c = 0; c < columns; ++c) out[p * nr + c] = element<kType>(rhs.data, first + p * rs + c);
      }
    } else if (rs == 1) {  // along its columns (a transposed operand, such as a linear layer's [N, K] weight)
      for (int64_t c = 0; c < columns; ++c) {
        for (int64_t p = 0; p < kc; ++p) out[p * nr + c] = element<kType>(rhs.data, first + c * cs + p);
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t c = 0; c < columns; ++c) out[p * nr + c] = element<kType>(rhs.data, first + p * rs + c * cs);
      }
    }
  }
}

// A packed block of the left operand: rows [i0, i0 + mc) and columns [p0, p0 + kc) as ceil(mc / mr) panels of
// kc x mr (k-major: the mr elements one step of k needs are adjacent), zero past row mc.
template <DType kType>
void pack_left(const MatrixOperand& lhs, int64_t batch, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t mr,
               float* packed) {
  const int64_t panels = (mc + mr - 1) / mr;
  const int64_t rs = lhs.row_stride, cs = lhs.column_stride;
  const int64_t base = batch * lhs.batch_stride + i0 * rs + p0 * cs;
  for (int64_t panel = 0; panel < panels; ++panel) {
    float* out = packed + panel * kc * mr;
    const int64_t rows = std::min(mr, mc - panel * mr);
    if (rows < mr) std::fill(out, out + kc * mr, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = base + (panel * mr + r) * rs;
      if (cs == 1) {
        for (int64_t p = 0; p < kc; ++p) out[p * mr + r] = element<kType>(lhs.data, row + p);
      } else {
        for (int64_t p = 0; p < kc; ++p) out[p * mr + r] = element<kType>(lhs.data, row + p * cs);
      }
    }
  }
}

// pack_left or pack_right, instantiated for the operand's dtype once per block rather than per element.
template <template <DType> class Pack, class... Args>
void pack(DType dtype, Args... args) {
  switch (dtype) {
    case DType::kFloat32:
      return Pack<DType::kFloat32>::run(args...);
    case DType::kBFloat16:
      return Pack<DType::kBFloat16>::run(args...);
    case DType::kFloat16:
      return Pack<DType::kFloat16>::run(args...);
  }
}
template <DType kType>
struct PackRight {
  template <class... Args>
  static void run(Args... args) { pack_right<kType>(args...); }
};
template <DType kType>
struct PackLeft {
  template <class... Args>
  static void run(Args... args) { pack_left<kType>(args...); }
};

#if SHIMKIT_X86_TILES
// The vector operations of each instruction set the tile is compiled for. Their target attributes let the
// flattened blocks below inline them; the tile itself is written once, over `Isa`.
struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  __attribute__((target("avx512f"))) static V zero() { return _mm512_setzero_ps(); }
  __attribute__((target("avx512f"))) static V load(const float* p) { return _mm512_loadu_ps(p); }
  __attribute__((target("avx512f"))) static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  __attribute__((target("avx512f"))) static V fma(float a, V b, V c) {
    return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c);
  }
};

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  __attribute__((target("avx2,fma"))) static V zero() { return _mm256_setzero_ps(); }
  __attribute__((target("avx2,fma"))) static V load(const float* p) { return _mm256_loadu_ps(p); }
  __attribute__((target("avx2,fma"))) static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  __attribute__((target("avx2,fma"))) static V fma(float a, V b, V c) {
    return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c);
  }
};

#endif

// Any CPU: four lanes of std::fma, which rounds once as the instructions above do (in software where the CPU
// has no fused multiply-add: slow, never different).
struct Portable {
  struct V {
    float lane[4];
  };
  static constexpr int kLanes = 4;
  static V zero() { return V{}; }
  static V load(const float* p) {
    V v;
    std::memcpy(v.lane, p, sizeof(v.lane));
    return v;
  }
  static void store(float* p, const V& v) { std::memcpy(p, v.lane, sizeof(v.lane)); }
  static V fma(float a, const V& b, const V& c) {
    V v;
    for (int l = 0; l < kLanes; ++l) v.lane[l] = std::fma(a, b.lane[l], c.lane[l]);
    return v;
  }
};

// The register tile: c[MR, NR] (row stride ldc) += the packed a (kc x MR) times the packed b (kc x NR), one
// fused multiply-add per term in order of k; `first`: the accumulators start at 0.0f rather than from c.
template <class Isa, int MR, int NV>
inline void tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool first) {
  constexpr int NR = NV * Isa::kLanes;
  typename Isa::V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = first ? Isa::zero() : Isa::load(c + r * ldc + v * Isa::kLanes);
  }
  for (int64_t p = 0; p < kc; ++p) {
    typename Isa::V column[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) column[v] = Isa::load(b + p * NR + v * Isa::kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = Isa::fma(a[p * MR + r], column[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) Isa::store(c + r * ldc + v * Isa::kLanes, acc[r][v]);
  }
}

// Every tile of a packed block: rows [0, mc) and columns [0, nc) of c (row stride ldc). Edge tiles run on a
// scratch tile, so the register tile never reads or writes outside the result.
template <class Isa, int MR, int NV>
inline void block(int64_t kc, int64_t mc, int64_t nc, const float* a, const float* b, float* c, int64_t ldc,
                  bool first) {
  constexpr int NR = NV * Isa::kLanes;
  alignas(64) float scratch[MR * NR] = {};
  for (int64_t j = 0; j < nc; j += NR) {
    const float* panel = b + (j / NR) * kc * NR;
    for (int64_t i = 0; i < mc; i += MR) {
      const float* rows = a + (i / MR) * kc * MR;
      float* target = c + i * ldc + j;
      if (i + MR <= mc && j + NR <= nc) {
        tile<Isa, MR, NV>(kc, rows, panel, target, ldc, first);
        continue;
      }
      const int64_t height = std::min<int64_t>(MR, mc - i), width = std::min<int64_t>(NR, nc - j);
      if (!first) {
        for (int64_t r = 0; r < height; ++r) std::memcpy(scratch + r * NR, target + r * ldc, width * sizeof(float));
      }
      tile<Isa, MR, NV>(kc, rows, panel, scratch, NR, first);
      for (int64_t r = 0; r < height; ++r) std::memcpy(target + r * ldc, scratch + r * NR, width * sizeof(float));
    }
  }
}

using Block = void (*)(int64_t, int64_t, int64_t, const float*, const float*, float*, int64_t, bool);

#if SHIMKIT_X86_TILES
// `flatten` inlines the tile and the vector operations into each; the register tiles are 6 x 32 (twelve of
// AVX-512's 32 registers), 6 x 16 (twelve of AVX2's 16) and 4 x 8.
__attribute__((target("avx512f"), flatten)) void block_avx512(int64_t kc, int64_t mc, int64_t nc, const float* a,
                                                              const float* b, float* c, int64_t ldc, bool first) {
  block<Avx512, 6, 2>(kc, mc, nc, a, b, c, ldc, first);
}
__attribute__((target("avx2,fma"), flatten)) void block_avx2(int64_t kc, int64_t mc, int64_t nc, const float* a,
                                                             const float* b, float* c, int64_t ldc, bool first) {
  block<Avx2, 6, 2>(kc, mc, nc, a, b, c, ldc, first);
}
#endif
__attribute__((flatten)) void block_portable(int64_t kc, int64_t mc, int64_t nc, const float* a, const float* b,
                                             float* c, int64_t ldc, bool first) {
  block<Portable, 4, 2>(kc, mc, nc, a, b, c, ldc, first);
}

// A few rows times a transposed right operand (a linear layer's [N, K] weight, read along k): packing it would cost
// as much as the product. kChains result elements advance together, each a scalar chain of fused multiply-adds
// over k in order reading its own column of the operand, so the sums are the tile's. Rows [0, m) of `lhs` (as
// float in `row`), columns [j_first, j_last) of matrix `batch`.
template <DType kType>
inline void few_rows_block(int64_t m, int64_t k, int64_t n, const MatrixOperand& lhs, const MatrixOperand& rhs,
                           int64_t batch, int64_t j_first, int64_t j_last, float* row, float* out) {
  constexpr int64_t kChains = 8;
  for (int64_t i = 0; i < m; ++i) {
    pack<PackLeft>(lhs.dtype, lhs, batch, i, int64_t{1}, int64_t{0}, k, int64_t{1}, row);
    for (int64_t j0 = j_first; j0 < j_last; j0 += kChains) {
      const int64_t columns = std::min(kChains, j_last - j0);
      int64_t first[kChains];
      float acc[kChains] = {};
      for (int64_t c = 0; c < kChains; ++c) {
        first[c] = batch * rhs.batch_stride + (j0 + std::min(c, columns - 1)) * rhs.column_stride;
      }
      for (int64_t p = 0; p < k; ++p) {
        const float x = row[p];
#pragma GCC unroll 8
        for (int64_t c = 0; c < kChains; ++c) acc[c] = std::fma(x, element<kType>(rhs.data, first[c] + p), acc[c]);
      }
      for (int64_t c = 0; c < columns; ++c) out[i * n + j0 + c] = acc[c];
    }
  }
}

template <DType kType>
struct FewRows {
  template <class... Args>
  static void run(Args... args) { few_rows_block<kType>(args...); }
};

using FewRowsBlock = void (*)(int64_t, int64_t, int64_t, const MatrixOperand&, const MatrixOperand&, int64_t,
                              int64_t, int64_t, float*, float*);

#if SHIMKIT_X86_TILES
// Compiled where std::fma is one instruction.
__attribute__((target("avx2,fma"), flatten)) void few_rows_fma(int64_t m, int64_t k, int64_t n,
                                                               const MatrixOperand& lhs, const MatrixOperand& rhs,
                                                               int64_t batch, int64_t j_first, int64_t j_last,
                                                               float* row, float* out) {
  pack<FewRows>(rhs.dtype, m, k, n, lhs, rhs, batch, j_first, j_last, row, out);
}
#endif
__attribute__((flatten)) void few_rows_portable(int64_t m, int64_t k, int64_t n, const MatrixOperand& lhs,
                                                const MatrixOperand& rhs, int64_t batch, int64_t j_first,
                                                int64_t j_last, float* row, float* out) {
  pack<FewRows>(rhs.dtype, m, k, n, lhs, rhs, batch, j_first, j_last, row, out);
}

struct Kernel {
  Block run;
  Blocking blocking;
  FewRowsBlock few_rows;
};

// The widest tile the CPU runs; SHIMKIT_CPU_ISA=portable|avx2 narrows it (read on every call, so a test can
// check that every width gives the same bits).
Kernel kernel() {
#if SHIMKIT_X86_TILES
  static const bool avx512 = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
  static const bool avx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  const char* asked = std::getenv("SHIMKIT_CPU_ISA");
  const std::string cap = asked == nullptr ? "" : asked;
  if (cap.empty() && avx512) return {block_avx512, {6, 32, 256, 192, 2048}, few_rows_fma};
  if (cap != "portable" && avx2) return {block_avx2, {6, 16, 256, 192, 2048}, few_rows_fma};
#endif
  return {block_portable, {4, 8, 256, 192, 2048}, few_rows_portable};
}

constexpr double kWorkPerThread = 1 << 20;
// Up to this many rows, a transposed right operand is read in place (few_rows_block) rather than packed.
constexpr int64_t kFewRows = 3;  // multiply-adds below which another thread costs more than it saves

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int cpu_threads() {
  if (const char* asked = std::getenv("SHIMKIT_CPU_THREADS")) {
    const long value = std::strtol(asked, nullptr, 10);
    if (value > 0) return static_cast<int>(std::min(value, 256L));
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(int64_t items, double work_per_item, const std::function<void(int64_t, int64_t)>& body) {
  if (items <= 0) return;
  const int64_t worth = static_cast<int64_t>(work_per_item * static_cast<double>(items) / kWorkPerThread);
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>({cpu_threads(), items, worth}));
  if (threads == 1) {
    body(0, items);
    return;
  }
  std::vector<std::exception_ptr> failures(static_cast<std::size_t>(threads));
  const auto share = [&](int64_t t) {
    try {
      body(items * t / threads, items * (t + 1) / threads);
    } catch (...) {
      failures[static_cast<std::size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(share, t);
  share(0);
  for (std::thread& helper : helpers) helper.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

void matrix_product(int64_t batch, int64_t m, int64_t k, int64_t n, const MatrixOperand& lhs,
                    const MatrixOperand& rhs, float* out) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::fill(out, out + batch * m * n, 0.0f);
    return;
  }
  const Kernel chosen = kernel();
  if (m <= kFewRows && rhs.row_stride == 1 && rhs.column_stride != 1) {
    constexpr int64_t kColumnsPerItem = 128;
    const int64_t blocks = ceil_div(n, kColumnsPerItem);
    parallel_for(batch * blocks, static_cast<double>(m * k * kColumnsPerItem), [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<std::size_t>(k));
      for (int64_t item = begin; item < end; ++item) {
        const int64_t b = item / blocks, j0 = (item % blocks) * kColumnsPerItem;
        chosen.few_rows(m, k, n, lhs, rhs, b, j0, std::min(n, j0 + kColumnsPerItem), row.data(), out + b * m * n);
      }
    });
    return;
  }
  const Blocking& blocking = chosen.blocking;
  // Work items are (matrix, rows, columns) blocks, split by columns first (each keeps its packed left block) and
  // by rows where the columns are too few for the threads. Each result element belongs to one item, whose tiles
  // sum all of k for it, so which thread runs an item never changes a bit of the result.
  const int64_t wanted = 2 * static_cast<int64_t>(cpu_threads());
  const int64_t column_splits = std::min(ceil_div(n, blocking.nr), std::max<int64_t>(1, ceil_div(wanted, batch)));
  const int64_t columns_per_item = blocking.nr * ceil_div(ceil_div(n, blocking.nr), column_splits);
  const int64_t column_items = ceil_div(n, columns_per_item);
  const int64_t row_splits =
      std::min(ceil_div(m, blocking.mr), std::max<int64_t>(1, ceil_div(wanted, batch * column_items)));
  const int64_t rows_per_item = blocking.mr * ceil_div(ceil_div(m, blocking.mr), row_splits);
  const int64_t row_items = ceil_div(m, rows_per_item);
  const int64_t items = batch * row_items * column_items;
  const double work =
      static_cast<double>(rows_per_item) * static_cast<double>(k) * static_cast<double>(columns_per_item);
  parallel_for(items, work, [&](int64_t begin, int64_t end) {
    const int64_t kc_max = std::min(blocking.kc, k);
    const int64_t nc_max = std::min(blocking.nc, columns_per_item);
    const int64_t right_floats = kc_max * blocking.nr * ceil_div(nc_max, blocking.nr);
    const int64_t left_floats = kc_max * blocking.mr * ceil_div(blocking.mc, blocking.mr);
    std::unique_ptr<float[]> right(new float[static_cast<std::size_t>(right_floats)]);
    std::unique_ptr<float[]> left(new float[static_cast<std::size_t>(left_floats)]);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / (row_items * column_items);
      const int64_t i_first = ((item / column_items) % row_items) * rows_per_item;
      const int64_t i_last = std::min(m, i_first + rows_per_item);
      const int64_t j_first = (item % column_items) * columns_per_item;
      const int64_t j_last = std::min(n, j_first + columns_per_item);
      float* c = out + b * m * n;
      for (int64_t j0 = j_first; j0 < j_last; j0 += blocking.nc) {
        const int64_t nc = std::min(blocking.nc, j_last - j0);
        for (int64_t p0 = 0; p0 < k; p0 += blocking.kc) {
          const int64_t kc = std::min(blocking.kc, k - p0);
          pack<PackRight>(rhs.dtype, rhs, b, p0, kc, j0, nc, blocking.nr, right.get());
          for (int64_t i0 = i_first; i0 < i_last; i0 += blocking.mc) {
            const int64_t mc = std::min(blocking.mc, i_last - i0);
            pack<PackLeft>(lhs.dtype, lhs, b, i0, mc, p0, kc, blocking.mr, left.get());
            chosen.run(kc, mc, nc, left.get(), right.get(), c + i0 * n + j0, n, p0 == 0);
          }
        }
      }
    }
  });
}

}  // namespace shimkit
