// aoti_torch_mps_fft_c2c for ExecuTorch's Metal runtime: allocates the result like self and dispatches
// fft.metal's kernels exactly as the plugin's launch_fft_c2c does on Linux through shimkit.metal (where
// the kernels are tested): mixed-radix Stockham passes for a length whose prime factors are all at most 13,
// else Bluestein's chirp-z transform through power-of-two Stockham passes.
//
// Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py, tests/test_metal_program_adapters.py). The MSL source is the
// string the registry-generated adapter file defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shimkit/metal_adapter.h"

extern "C" const char shimkit_msl_source_fft[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, aoti_torch_empty_strided.
namespace executorch {
namespace backends {
namespace metal {
namespace {

constexpr const char* kShim = "aoti_torch_mps_fft_c2c";
using shimkit::scalar_types::kFloat32;
// fft.py's RADICES, largest first: fft.metal's kMaxRadix is the largest.
constexpr uint32_t kRadices[] = {8, 4, 2, 3, 5, 7, 11, 13};
constexpr uint64_t kMaxGroup = 256;

// The Stockham passes for length n, or none when a prime factor above 13 leaves it to Bluestein. One
// point is one radix-1 pass (it writes the point times the scale).
bool stockham_radices(uint32_t n, std::vector<uint32_t>& passes) {
  passes.clear();
  for (uint32_t radix : kRadices) {
    while (n % radix == 0 && n > 1) {
      passes.push_back(radix);
      n /= radix;
    }
  }
  if (n != 1) return false;
  if (passes.empty()) passes.push_back(1);
  return true;
}

std::shared_ptr<ETMetalKernelFunction> kernel_of(const char* name) {
  static std::mutex mutex;
  static std::unique_ptr<ETMetalShaderLibrary> library;
  std::lock_guard<std::mutex> lock(mutex);
  if (!library) library.reset(new ETMetalShaderLibrary(shimkit_msl_source_fft));
  std::shared_ptr<ETMetalKernelFunction> kernel = library->getKernelFunction(name);
  if (!kernel) ET_LOG(Error, "%s: the MSL library has no %s", kShim, name);
  return kernel;
}

// A kernel argument: a tensor's buffer, or a uint, int or float constant.
struct Arg {
  enum Kind { kTensor, kUint, kInt, kFloatValue } kind;
  Tensor* tensor = nullptr;
  uint32_t uint_value = 0;
  int32_t int_value = 0;
  float float_value = 0.0f;

  Arg(Tensor* t) : kind(kTensor), tensor(t) {}
  static Arg of_uint(uint32_t v) { Arg a(nullptr); a.kind = kUint; a.uint_value = v; return a; }
  static Arg of_int(int32_t v) { Arg a(nullptr); a.kind = kInt; a.int_value = v; return a; }
  static Arg of_float(float v) { Arg a(nullptr); a.kind = kFloatValue; a.float_value = v; return a; }
};

// Dispatches `name` on a grid of threads[0] x threads[1] (groups of up to 256 along x) with `args` at
// buffer indices 0, 1, ...
bool run(const char* name, const std::vector<Arg>& args, uint64_t x, uint64_t y) {
  std::shared_ptr<ETMetalKernelFunction> kernel = kernel_of(name);
  if (!kernel) return false;
  kernel->runCommandBlock([&] {
    kernel->startEncoding();
    unsigned index = 0;
    for (const Arg& arg : args) {
      switch (arg.kind) {
        case Arg::kTensor: kernel->setArg(index++, *arg.tensor); break;
        case Arg::kUint: kernel->setArg(index++, arg.uint_value); break;
        case Arg::kInt: kernel->setArg(index++, &arg.int_value, sizeof(arg.int_value)); break;
        case Arg::kFloatValue: kernel->setArg(index++, arg.float_value); break;
      }
    }
    const uint64_t threads[2] = {x, y};
    const uint64_t group[2] = {std::min(x, kMaxGroup), 1};
    kernel->dispatchArrayWithGroupSize(threads, 2, group, 2);
  });
  return true;
}

// Contiguous float32 [rows, n, 2] tensors made for one call and freed when it returns.
class Scratch {
 public:
  ~Scratch() {
    for (AOTITensorHandle t : made_) aoti_torch_delete_tensor_object(t);
  }
  Tensor* rows(int64_t rows, int64_t n) {
    AOTITensorHandle t = nullptr;
    if (shimkit_adapter::empty_contiguous({rows, n, 2}, kFloat32, &t) != Error::Ok) return nullptr;
    made_.push_back(t);
    return t;
  }

 private:
  std::vector<AOTITensorHandle> made_;
};

// The Stockham passes of `passes` over `batch` rows of n from `in` (read only) into `out`, ping-ponging
// through a scratch tensor so that the last pass writes `out`; `scale` multiplies what it writes.
bool stockham(Scratch& scratch, Tensor* out, Tensor* in, const std::vector<uint32_t>& passes, int64_t batch,
              uint32_t n, int32_t sign, float scale) {
  Tensor* other = passes.size() > 1 ? scratch.rows(batch, n) : out;
  if (other == nullptr) return false;
  // The last pass must write `out`: an odd count starts there, an even one in the scratch.
  Tensor* target = passes.size() % 2 == 1 ? out : other;
  Tensor* source = in;
  uint32_t done = 1;
  for (size_t index = 0; index < passes.size(); ++index) {
    const uint32_t radix = passes[index];
    const float pass_scale = index + 1 == passes.size() ? scale : 1.0f;
    if (!run("fft_stockham_pass_float",
             {target, source, Arg::of_uint(n), Arg::of_uint(radix), Arg::of_uint(done), Arg::of_int(sign),
              Arg::of_float(pass_scale)},
             n / radix, static_cast<uint64_t>(batch))) {
      return false;
    }
    done *= radix;
    source = target;
    target = target == out ? other : out;
  }
  return true;
}

// Bluestein's chirp-z transform: rows times the chirp, zero-padded to a power of two m >= 2n - 1,
// convolved with the conjugate chirp through Stockham FFTs of length m, times the chirp and `scale`.
bool bluestein(Scratch& scratch, Tensor* out, Tensor* in, int64_t batch, uint32_t n, int32_t sign, float scale) {
  uint32_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  std::vector<uint32_t> power_of_two;
  stockham_radices(m, power_of_two);
  Tensor* chirped = scratch.rows(batch, m);
  Tensor* spectrum = scratch.rows(batch, m);
  Tensor* convolved = scratch.rows(batch, m);
  Tensor* chirp_filter = scratch.rows(1, m);
  Tensor* filter = scratch.rows(1, m);
  if (!chirped || !spectrum || !convolved || !chirp_filter || !filter) return false;
  const uint64_t rows = static_cast<uint64_t>(batch);
  return run("fft_bluestein_filter_float", {chirp_filter, Arg::of_uint(n), Arg::of_uint(m), Arg::of_int(sign)}, m,
             1) &&
         stockham(scratch, filter, chirp_filter, power_of_two, 1, m, -1, 1.0f) &&
         run("fft_bluestein_chirp_float", {chirped, in, Arg::of_uint(n), Arg::of_uint(m), Arg::of_int(sign)}, m,
             rows) &&
         stockham(scratch, spectrum, chirped, power_of_two, batch, m, -1, 1.0f) &&
         run("fft_bluestein_multiply_float", {spectrum, filter, Arg::of_uint(m)}, m, rows) &&
         stockham(scratch, convolved, spectrum, power_of_two, batch, m, 1, 1.0f / static_cast<float>(m)) &&
         run("fft_bluestein_finish_float",
             {out, convolved, Arg::of_uint(n), Arg::of_uint(m), Arg::of_int(sign), Arg::of_float(scale)}, n, rows);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_fft_c2c(AOTITensorHandle self, int32_t inverse, int64_t normalization,
                                                 AOTITensorHandle* ret0) {
  if (!shimkit_adapter::non_null(kShim, {self, ret0})) return Error::InvalidArgument;
  Tensor* input = self;
  const int64_t rank = input->dim();
  if (static_cast<int32_t>(input->scalar_type()) != kFloat32 || rank < 2 || input->size(rank - 1) != 2) {
    ET_LOG(Error, "%s: self must be float32 real pairs [..., n, 2], got dtype %d with %lld dims", kShim,
           static_cast<int>(input->scalar_type()), static_cast<long long>(rank));
    return Error::InvalidArgument;
  }
  if (!shimkit_adapter::check_contiguous(kShim, "self", *input)) return Error::NotSupported;
  const int64_t points = input->size(rank - 2);
  if (points < 1 || points > (int64_t{1} << 30)) {
    ET_LOG(Error, "%s: a transform of %lld points (1 to 2^30 are supported)", kShim, static_cast<long long>(points));
    return Error::InvalidArgument;
  }
  if (normalization < 0 || normalization > 2) {
    ET_LOG(Error, "%s: normalization must be ATen's fft_norm_mode 0, 1 or 2, got %lld", kShim,
           static_cast<long long>(normalization));
    return Error::InvalidArgument;
  }
  const uint32_t n = static_cast<uint32_t>(points);
  int64_t batch = 1;
  for (int64_t d = 0; d < rank - 2; ++d) batch *= input->size(d);

  const std::vector<int64_t> sizes(input->sizes().begin(), input->sizes().end());
  AOTITensorHandle out = nullptr;
  if (shimkit_adapter::empty_contiguous(sizes, kFloat32, &out) != Error::Ok) {
    ET_LOG(Error, "%s: could not allocate the result", kShim);
    return Error::MemoryAllocationFailed;
  }
  if (batch > 0) {
    const float scale = normalization == 0 ? 1.0f
                        : normalization == 1 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)))
                                             : static_cast<float>(1.0 / static_cast<double>(n));
    const int32_t sign = inverse != 0 ? 1 : -1;
    Scratch scratch;
    std::vector<uint32_t> passes;
    const bool ran = stockham_radices(n, passes) ? stockham(scratch, out, input, passes, batch, n, sign, scale)
                                                 : bluestein(scratch, out, input, batch, n, sign, scale);
    if (!ran) {
      aoti_torch_delete_tensor_object(out);
      ET_LOG(Error, "%s: could not dispatch the FFT of %u points", kShim, n);
      return Error::Internal;
    }
  }
  *ret0 = out;
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch
