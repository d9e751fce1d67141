// What every CPU fallback of the Linux Metal runtime shares: reading AOTI tensor handles, the checks
// the upstream Metal ops make, allocating results and the C-ABI wrapper.
//
// The fallbacks are compiled against torch's AOTI C accessor API (aoti_torch/c/shim.h) and nothing
// else from torch, because two implementations of that API link with them: libtorch's (tests, over
// at::Tensor*) and shimkit's Linux Metal runtime (over ExecuTorch tensors). Only the accessors named
// in that header's first half are used: data pointer, rank, sizes, strides, dtype, device, empty_strided
// and delete. Memory is read directly, so a tensor must live in host-addressable memory: the CPU, or
// the Linux runtime's "mps" buffers, which are host memory.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "shimkit/aoti_adapter.h"
#include "shimkit/dtype.h"
#include "shimkit/status.h"
#include "shimkit/tensor_view.h"
#include "shimkit/matrix_product.h"

namespace shimkit {
namespace metal_fallbacks {

// One tensor argument as read through the accessors. `view.dtype` is meaningful only when
// `is_float`; integer tensors are read through `view.data` and the strides directly.
struct Arg {
  std::string name;
  int32_t code = 0;  // the scalar-type code aoti_torch_get_dtype returned
  bool is_float = false;
  TensorView view;

  int64_t dim() const { return view.dim(); }
  int64_t size(int64_t d) const { return view.sizes[static_cast<std::size_t>(d)]; }
  int64_t stride(int64_t d) const { return view.strides[static_cast<std::size_t>(d)]; }
  int64_t numel() const { return view.numel(); }
  // ATen's is_contiguous: dense row-major, dimensions of size 1 may have any stride.
  bool contiguous() const;
  // "bfloat16[3, 4] strides [1, 3]", with the real dtype name for integer tensors too.
  std::string describe() const;
  // "[3, 4] strides [1, 3]"
  std::string layout() const;
  float load(int64_t offset) const { return load_float(view.data, view.dtype, offset); }
  void store(int64_t offset, float value) const { store_float(view.data, view.dtype, offset, value); }
};

// `value` rounded to `like`'s float dtype, as one MPSGraph operation producing that dtype rounds its result.
inline float rounded(const Arg& like, float value) {
  unsigned char storage[4] = {};
  store_float(storage, like.view.dtype, 0, value);
  return load_float(storage, like.view.dtype, 0);
}

// Reads a required handle (null is an error naming `name`).
Status read_arg(AtenTensorHandle handle, const char* name, Arg* arg);
// Reads an optional `AtenTensorHandle*` argument: absent when the pointer or the handle is null.
Status read_optional_arg(const AtenTensorHandle* handle, const char* name, Arg* arg, bool* present);

// The dtype codes, from the API's own constants (libtorch's and the runtime's agree on c10's values).
int32_t float32_code();
int32_t bfloat16_code();
int32_t float16_code();
int32_t int64_code();
int32_t int32_code();
int32_t uint8_code();

std::string dtype_text(int32_t code);

// "x has dtype float16; accepted: float32, bfloat16 (<why>)"
Status require_dtype(const Arg& arg, std::initializer_list<int32_t> accepted, const char* why);
// The float32/bfloat16 pair every upstream Metal op here is limited to.
Status require_metal_float(const Arg& arg);
Status require_same_dtype(const Arg& arg, const Arg& reference);
// Where an upstream op binds `arg` as `reference`'s element type (`file` does so for every operand), another dtype
// would have its bits reinterpreted there: refused, never computed as ATen would.
Status require_bound_as(const Arg& arg, const Arg& reference, const char* file);
Status require_rank(const Arg& arg, int64_t rank, const char* what);
// Where upstream feeds a buffer as dense row-major and refuses (or cannot read) anything else.
Status require_contiguous(const Arg& arg, const char* why);
// Several output elements sharing one address (an expanded `out`) cannot be written.
Status require_writable(const Arg& arg);

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// How many elements `arg`'s view reaches from its data pointer (1 + the sum of (size - 1) * |stride|; 0 if empty):
// fewer than numel() where elements share memory (an expanded view).
int64_t dense_span(const Arg& arg);
// "channels-last" (strides of NHWC or NDHWC memory) or "strided": how to name a layout that is not contiguous.
std::string layout_name(const Arg& arg);

// A result tensor the fallback allocated: deleted on destruction unless released to the caller, so
// a fallback that fails after allocating leaks nothing and hands out nothing.
class Result {
 public:
  Result() = default;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result();

  Arg arg;
  AtenTensorHandle release() { return std::exchange(handle_, nullptr); }

 private:
  friend Status allocate(const Arg&, const std::vector<int64_t>&, int32_t, const char*, Result*);
  AtenTensorHandle handle_ = nullptr;
};

// A contiguous tensor of `sizes` and `dtype` on `device_of`'s device, as the upstream ops allocate
// theirs (on the device of their first input).
Status allocate(const Arg& device_of, const std::vector<int64_t>& sizes, int32_t dtype, const char* name,
                Result* result);

// How a fallback ends: the caller owns the tensors from here on.
Status hand_over(Result* result, AtenTensorHandle* ret);
Status hand_over(Result* first, AtenTensorHandle* ret0, Result* second, AtenTensorHandle* ret1);

// Visits every element of a view in row-major order of its index, with its offset in elements.
template <class Fn>
void for_each_index(const std::vector<int64_t>& sizes, Fn&& fn) {
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  if (count == 0) return;
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t linear = 0; linear < count; ++linear) {
    fn(linear, index);
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

inline int64_t offset_of(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (std::size_t d = 0; d < index.size(); ++d) offset += index[d] * strides[d];
  return offset;
}

// lhs @ rhs as a dense float32 [batch, m, n] (shimkit/matrix_product.h: the sum over k in order, fused), for 2-D
// operands of [m, k] and [k, n] (batch 1) or 3-D ones of [batch, m, k] and [batch, k, n], read at their strides
// (those an upstream op assumes, where read_as_upstream gave them). The result is a copy: an operand may alias
// the tensor it is stored into.
std::vector<float> product(int64_t batch, int64_t m, int64_t k, int64_t n, const Arg& lhs, const Arg& rhs);
// Bytes of two 4-bit codes each, low nibble first (the Metal kernels' order), as `values[code]`: 2 * count floats.
inline void unpack_nibbles(const uint8_t* bytes, int64_t count, const float values[16], float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[2 * i] = values[bytes[i] & 0x0F];
    out[2 * i + 1] = values[bytes[i] >> 4];
  }
}
// The elements of a float tensor as float32, in row-major order of its index.
std::vector<float> load_dense(const Arg& arg);
// Writes row-major `values` into `arg` (any strides), rounding once to its dtype.
void store_dense(const Arg& arg, const std::vector<float>& values);

// Where a failure goes besides the last error: the Linux Metal runtime keeps a program's first failure
// for the host to report (shim_mps.cpp defines it); a build without the runtime (the tests over
// libtorch) has none.
extern "C" __attribute__((weak)) void shimkit_runtime_record_failure(const char* message);
// Work an Objective-C++ adapter encoded on the stream to run later (shimkit/objc_hooks.h in the runtime; a build
// without one has none). `sync_type` is a SyncType: kCommitAndWait commits it and waits.
extern "C" __attribute__((weak)) void shimkit_runtime_synchronize_encoded_work(int sync_type);
constexpr int kCommitAndWait = 2;
// Where this call meets a known divergence: upstream's runtime computes something other than ATen here, and the
// fallback computes what upstream does. The Linux Metal runtime keeps it for the host, which makes it the
// verdict's cause even where the numbers happen to agree (an all-ones input); without the runtime, nothing.
// `behaviour` is the same text for every call it concerns (the report counts them), `detail` this call's.
extern "C" __attribute__((weak)) void shimkit_runtime_record_divergence(const char* symbol, const char* behaviour,
                                                                        const char* detail);

inline void note_divergence(const char* symbol, const std::string& behaviour, const std::string& detail) {
  if (shimkit_runtime_record_divergence != nullptr) {
    shimkit_runtime_record_divergence(symbol, behaviour.c_str(), detail.c_str());
  }
}

// `arg` as an upstream op that takes it through sizes() alone reads it: its data pointer (which holds the storage
// offset there: memory.cpp folds it in) read with `strides`, the layout `file` assumes (`assumed`, "a contiguous
// NCHW buffer"), whatever its own. Where its own differ, the call is a divergence of `symbol` (`issue`: the upstream
// issue, or ""); an `arg` spanning fewer elements than that read reaches is refused, never read past its end.
Status read_as_upstream(const char* symbol, const char* file, const char* issue, const Arg& arg,
                        const std::vector<int64_t>& strides, const std::string& assumed, Arg* read);

// The matrix operands of op_mm.mm and op_addmm.mm as those files read them: `mat2` [K, N] as a dense [K, N] buffer, or
// as a dense [N, K] buffer transposed when its strides are (1, not 1); `out` written as a dense [M, N] buffer from
// its data pointer whatever its sizes (refused where that write would run past its end). Divergences as above.
Status read_mat2_as_upstream(const char* symbol, const char* file, const Arg& mat2, int64_t k, int64_t n, Arg* read);
Status write_out_as_upstream(const char* symbol, const char* file, const Arg& out, int64_t m, int64_t n,
                             Arg* written);

// Runs `body` behind the C ABI: no exception escapes, a failure is recorded as the last error
// ("<symbol>: <message>", read with shimkit_metal_fallback_last_error) and returned as nonzero.
template <class Body>
AOTITorchError run(const char* symbol, Body&& body) noexcept {
  // Upstream's ops run after what the stream holds; these run at once, so what it holds runs first.
  if (shimkit_runtime_synchronize_encoded_work != nullptr) shimkit_runtime_synchronize_encoded_work(kCommitAndWait);
  const StatusCode code = aoti::run_shim(symbol, body, [](const std::string& message) {
    if (shimkit_runtime_record_failure != nullptr) shimkit_runtime_record_failure(message.c_str());
  });
  return code == StatusCode::kOk ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

inline Status invalid(std::string message) { return Status::invalid_argument(std::move(message)); }
inline Status unsupported(std::string message) { return Status::unsupported(std::move(message)); }

}  // namespace metal_fallbacks
}  // namespace shimkit
