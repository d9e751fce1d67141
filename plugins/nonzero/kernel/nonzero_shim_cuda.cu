// aoti_torch_cuda_nonzero for ExecuTorch's CUDA runtime: the c-shim Inductor calls for aten::nonzero on CUDA
// (recorded as at::_ops::nonzero::call), which that runtime lacks. The coordinates of the nonzero elements of
// `self`, in row-major order, as torch.nonzero returns them on CUDA: int64, shape (count, ndim), strides
// (1, max(count, 1)) -- ATen writes an (ndim, count) tensor and returns its transpose, and Inductor's fake
// nonzero gives Inductor the same strides, which the code after the call indexes with.
//
// Written against the AOTI c-shim ABI alone (no ExecuTorch or torch header), so that the same source links
// into ExecuTorch's CUDA runtime and against libtorch (tools/cuda_nonzero_check.py checks it there against
// torch.nonzero). The functions it calls, and where ExecuTorch's CUDA runtime declares them:
//   backends/aoti/common_shims_slim.h     aoti_torch_get_dim, aoti_torch_get_sizes, aoti_torch_get_strides,
//                                         aoti_torch_get_data_ptr, aoti_torch_get_dtype,
//                                         aoti_torch_get_device_type, aoti_torch_get_device_index,
//                                         aoti_torch_dtype_{float32,float16,bfloat16,int64,int32,int16,int8,
//                                         uint8,bool}, aoti_torch_device_type_cuda
//   backends/cuda/runtime/shims/memory.h  aoti_torch_empty_strided, aoti_torch_delete_tensor_object
//   backends/cuda/runtime/shims/cuda_guard.h  aoti_torch_get_current_cuda_stream
// libtorch declares each of them in torch/csrc/inductor/aoti_torch/c/shim.h with the same C types.
//
// Three kernels on the caller's current stream, no atomics, every count in int64:
//   1. count_chunks: block b counts the nonzero elements of its chunk of row-major indices;
//   2. scan_counts:  one block turns the chunk counts into each chunk's first output row, and the total;
//   the total is copied to the host and the stream synchronized (as ATen's CUDA nonzero does), the result
//   allocated with aoti_torch_empty_strided, then
//   3. write_coordinates: block b walks its chunk again, a tile of blockDim elements at a time, and each
//      nonzero element writes its coordinates to its row (ballot + popcount within a warp, a prefix over
//      the warps of the tile): the rows come out in row-major order.
// Any strides (a non-contiguous view is read in place), 0-d (result (count, 0)), empty tensors (no launch).
// NaN is nonzero and -0.0 is zero, as in ATen: floating-point values are compared as values (float,
// double) or by their bits without the sign (half, bfloat16, which need no cuda_fp16.h).
//
// Errors are returned, never raised: AOTITorchError is int32_t in libtorch (0 success) and ExecuTorch's
// Error enum (a 32-bit code, 0 Ok) in its runtime; the codes below are ExecuTorch's
// (runtime/core/error.h), any non-zero one is a failure to libtorch. A failing call of the runtime returns
// its own code.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#if defined(_WIN32)
#define SHIMKIT_EXPORT __declspec(dllexport)
#else
#define SHIMKIT_EXPORT __attribute__((visibility("default")))
#endif

// The AOTI c-shim ABI, as torch/csrc/inductor/aoti_torch/c/shim.h spells it. ExecuTorch's CUDA runtime
// defines the same C symbols over its SlimTensor*: a handle is passed through, never looked into.
struct AtenTensorOpaque;
typedef AtenTensorOpaque* AtenTensorHandle;
typedef int32_t AOTITorchError;

extern "C" {
AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim);
AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes);
AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides);
AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr);
AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype);
AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret_device_type);
AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor, int32_t* ret_device_index);
int32_t aoti_torch_device_type_cuda();
int32_t aoti_torch_dtype_float32();
int32_t aoti_torch_dtype_float16();
int32_t aoti_torch_dtype_bfloat16();
int32_t aoti_torch_dtype_int64();
int32_t aoti_torch_dtype_int32();
int32_t aoti_torch_dtype_int16();
int32_t aoti_torch_dtype_int8();
int32_t aoti_torch_dtype_uint8();
int32_t aoti_torch_dtype_bool();
AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AtenTensorHandle* ret_new_tensor);
AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
}

namespace shimkit_nonzero_cuda {
namespace {

constexpr const char* kShim = "aoti_torch_cuda_nonzero";
// ExecuTorch's error codes (runtime/core/error.h).
constexpr AOTITorchError kOk = 0x00;
constexpr AOTITorchError kInternal = 0x01;
constexpr AOTITorchError kNotSupported = 0x10;
constexpr AOTITorchError kInvalidArgument = 0x12;
constexpr AOTITorchError kMemoryAllocationFailed = 0x21;
// c10::ScalarType::Double. ExecuTorch's CUDA runtime holds no float64 tensor and has no
// aoti_torch_dtype_float64 to ask (libtorch has): its code is fixed by c10's enum, which the runtime's own
// ScalarType copies (backends/aoti/slim/c10/core/ScalarType.h keeps 7 for it).
constexpr int32_t kDoubleCode = 7;

constexpr int kMaxDims = 25;          // ATen's CUDA nonzero takes at most MAX_DIMS (25) dimensions
constexpr int kThreads = 256;         // counting and writing blocks
constexpr int kScanThreads = 1024;    // the one scanning block: at most this many chunks
constexpr int64_t kMinChunk = 2048;   // elements a block counts at least (8 per thread)

struct Geometry {
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];  // in elements
  int ndim;
  bool contiguous;
};

template <typename T>
struct NonzeroOf {
  __device__ __forceinline__ static bool test(T value) { return value != T(0); }
};
// float and double compare as values: NaN != 0 holds, -0.0 != 0 does not.
// half and bfloat16 arrive as their bits (uint16_t tags below): nonzero unless every bit but the sign is 0.
struct HalfBits {
  uint16_t bits;
};
struct BFloat16Bits {
  uint16_t bits;
};
template <>
struct NonzeroOf<HalfBits> {
  __device__ __forceinline__ static bool test(HalfBits value) { return (value.bits & 0x7fffu) != 0; }
};
template <>
struct NonzeroOf<BFloat16Bits> {
  __device__ __forceinline__ static bool test(BFloat16Bits value) { return (value.bits & 0x7fffu) != 0; }
};

// The element offset of row-major index `index`.
__device__ __forceinline__ int64_t offset_of(const Geometry& g, int64_t index) {
  if (g.contiguous) return index;
  int64_t offset = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t size = g.sizes[d];
    offset += (index % size) * g.strides[d];
    index /= size;
  }
  return offset;
}

template <typename T>
__device__ __forceinline__ bool nonzero_at(const T* data, const Geometry& g, int64_t index) {
  return NonzeroOf<T>::test(data[offset_of(g, index)]);
}

// The sum of `value` over the block (kThreads threads), in every thread.
__device__ __forceinline__ int64_t block_sum(int64_t value, int64_t* warp_sums) {
  for (int delta = 16; delta > 0; delta >>= 1) value += __shfl_down_sync(0xffffffffu, value, delta);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  int64_t total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
count_chunks(const T* __restrict__ data, Geometry g, int64_t numel, int64_t chunk, int64_t* __restrict__ counts) {
  __shared__ int64_t warp_sums[kThreads / 32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < numel ? begin + chunk : numel;
  int64_t count = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) count += nonzero_at(data, g, i) ? 1 : 0;
  const int64_t total = block_sum(count, warp_sums);
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// counts[0..chunks) becomes each chunk's first row (an exclusive prefix sum); counts[chunks] the total.
__global__ void __launch_bounds__(kScanThreads) scan_counts(int64_t* counts, int chunks) {
  __shared__ int64_t warp_sums[kScanThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t own = threadIdx.x < chunks ? counts[threadIdx.x] : 0;
  int64_t inclusive = own;
  for (int delta = 1; delta < 32; delta <<= 1) {
    const int64_t other = __shfl_up_sync(0xffffffffu, inclusive, delta);
    if (lane >= delta) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  if (threadIdx.x < chunks) counts[threadIdx.x] = before + inclusive - own;
  if (threadIdx.x == kScanThreads - 1) counts[chunks] = before + inclusive;
}

// Row r of the (count, ndim) result with strides (1, count): coordinate d at out[r + d * count].
template <typename T>
__global__ void __launch_bounds__(kThreads)
write_coordinates(const T* __restrict__ data, Geometry g, int64_t numel, int64_t chunk,
                  const int64_t* __restrict__ first_rows, int64_t count, int64_t* __restrict__ out) {
  __shared__ int warp_counts[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < numel ? begin + chunk : numel;
  int64_t row = first_rows[blockIdx.x];
  // Every thread runs every tile (the bound is the block's): the ballots and barriers see the whole block.
  for (int64_t tile = begin; tile < end; tile += kThreads) {
    const int64_t index = tile + threadIdx.x;
    const bool here = index < end && nonzero_at(data, g, index);
    const unsigned ballot = __ballot_sync(0xffffffffu, here);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0;
    int tile_count = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      tile_count += warp_counts[w];
    }
    if (here) {
      const int64_t r = row + before + __popc(ballot & ((1u << lane) - 1u));
      if (r < count) {  // the count pass saw the same data; guarded all the same
        int64_t rest = index;
        for (int d = g.ndim - 1; d >= 0; --d) {
          out[r + d * count] = rest % g.sizes[d];
          rest /= g.sizes[d];
        }
      }
    }
    row += tile_count;
    __syncthreads();  // warp_counts is written again by the next tile
  }
}

// The device `index` current for the shim's duration (kernels launch on the current device).
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    ok_ = cudaGetDevice(&previous_) == cudaSuccess;
    if (ok_ && previous_ != index) ok_ = cudaSetDevice(index) == cudaSuccess;
  }
  ~DeviceScope() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

// An int64 tensor the shim allocates through the runtime, deleted unless released.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  ~OwnedTensor() {
    if (handle_ != nullptr) aoti_torch_delete_tensor_object(handle_);
  }
  AOTITorchError allocate(int64_t ndim, const int64_t* sizes, const int64_t* strides, int32_t device) {
    return aoti_torch_empty_strided(ndim, sizes, strides, aoti_torch_dtype_int64(), aoti_torch_device_type_cuda(),
                                    device, &handle_);
  }
  AtenTensorHandle get() const { return handle_; }
  AtenTensorHandle release() {
    AtenTensorHandle handle = handle_;
    handle_ = nullptr;
    return handle;
  }

 private:
  AtenTensorHandle handle_ = nullptr;
};

AOTITorchError cuda_failure(const char* what, cudaError_t error) {
  std::fprintf(stderr, "%s: %s failed: %s\n", kShim, what, cudaGetErrorString(error));
  return kInternal;
}

AOTITorchError runtime_failure(const char* what, AOTITorchError error) {
  std::fprintf(stderr, "%s: %s returned error %d\n", kShim, what, static_cast<int>(error));
  return error != kOk ? error : kInternal;
}

// aoti_torch_empty_strided failed, or said it succeeded without a tensor.
AOTITorchError allocation_failure(const char* what, AOTITorchError error) {
  std::fprintf(stderr, "%s: could not allocate %s (error %d)\n", kShim, what, static_cast<int>(error));
  return error != kOk ? error : kMemoryAllocationFailed;
}

AOTITorchError int64_data(AtenTensorHandle tensor, int64_t** data) {
  void* pointer = nullptr;
  const AOTITorchError error = aoti_torch_get_data_ptr(tensor, &pointer);
  *data = static_cast<int64_t*>(pointer);
  return error;
}

template <typename T>
AOTITorchError nonzero_typed(const void* raw, const Geometry& g, int64_t numel, int32_t device,
                             cudaStream_t stream, AtenTensorHandle* ret0) {
  const T* data = static_cast<const T*>(raw);
  int64_t chunks = (numel + kMinChunk - 1) / kMinChunk;
  if (chunks > kScanThreads) chunks = kScanThreads;
  const int64_t chunk = (numel + chunks - 1) / chunks;
  chunks = (numel + chunk - 1) / chunk;

  OwnedTensor first_rows;  // chunks + 1 int64: the chunk counts, then their first rows and the total
  const int64_t scratch_size = chunks + 1;
  const int64_t unit_stride = 1;
  AOTITorchError error = first_rows.allocate(1, &scratch_size, &unit_stride, device);
  if (error != kOk || first_rows.get() == nullptr) return allocation_failure("the chunk counts", error);
  int64_t* rows = nullptr;
  if ((error = int64_data(first_rows.get(), &rows)) != kOk) return runtime_failure("aoti_torch_get_data_ptr", error);

  count_chunks<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(data, g, numel, chunk, rows);
  scan_counts<<<1, kScanThreads, 0, stream>>>(rows, static_cast<int>(chunks));
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return cuda_failure("launching the counting kernels", status);
  int64_t count = 0;
  status = cudaMemcpyAsync(&count, rows + chunks, sizeof(count), cudaMemcpyDeviceToHost, stream);
  if (status != cudaSuccess) return cuda_failure("copying the count to the host", status);
  status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) return cuda_failure("waiting for the count", status);
  if (count < 0 || count > numel) {
    std::fprintf(stderr, "%s: counted %lld nonzero elements of %lld\n", kShim, static_cast<long long>(count),
                 static_cast<long long>(numel));
    return kInternal;
  }

  OwnedTensor result;
  const int64_t sizes[2] = {count, g.ndim};
  const int64_t strides[2] = {1, count > 1 ? count : 1};
  if ((error = result.allocate(2, sizes, strides, device)) != kOk || result.get() == nullptr) {
    return allocation_failure("the result", error);
  }
  if (count > 0 && g.ndim > 0) {
    int64_t* out = nullptr;
    if ((error = int64_data(result.get(), &out)) != kOk) return runtime_failure("aoti_torch_get_data_ptr", error);
    write_coordinates<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(data, g, numel, chunk, rows,
                                                                                  count, out);
    status = cudaGetLastError();
    if (status != cudaSuccess) return cuda_failure("launching write_coordinates", status);
  }
  // The scratch is freed now, ordered after the writing kernel on the same stream (libtorch's caching
  // allocator and ExecuTorch's cudaFreeAsync both free on the stream it was allocated on, the current one).
  *ret0 = result.release();
  return kOk;
}

AOTITorchError empty_result(int64_t ndim, int32_t device, AtenTensorHandle* ret0) {
  OwnedTensor result;
  const int64_t sizes[2] = {0, ndim};
  const int64_t strides[2] = {1, 1};
  const AOTITorchError error = result.allocate(2, sizes, strides, device);
  if (error != kOk || result.get() == nullptr) return allocation_failure("the result", error);
  *ret0 = result.release();
  return kOk;
}

}  // namespace
}  // namespace shimkit_nonzero_cuda

extern "C" SHIMKIT_EXPORT AOTITorchError aoti_torch_cuda_nonzero(AtenTensorHandle self, AtenTensorHandle* ret0) {
  using namespace shimkit_nonzero_cuda;
  if (self == nullptr || ret0 == nullptr) {
    std::fprintf(stderr, "%s: null %s\n", kShim, self == nullptr ? "self" : "ret0");
    return kInvalidArgument;
  }
  *ret0 = nullptr;
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  void* data = nullptr;
  int32_t dtype = 0;
  int32_t device_type = 0;
  int32_t device = 0;
  AOTITorchError error = kOk;
  if ((error = aoti_torch_get_dim(self, &ndim)) != kOk) return runtime_failure("aoti_torch_get_dim", error);
  if ((error = aoti_torch_get_sizes(self, &sizes)) != kOk) return runtime_failure("aoti_torch_get_sizes", error);
  if ((error = aoti_torch_get_strides(self, &strides)) != kOk) return runtime_failure("aoti_torch_get_strides", error);
  if ((error = aoti_torch_get_data_ptr(self, &data)) != kOk) return runtime_failure("aoti_torch_get_data_ptr", error);
  if ((error = aoti_torch_get_dtype(self, &dtype)) != kOk) return runtime_failure("aoti_torch_get_dtype", error);
  if ((error = aoti_torch_get_device_type(self, &device_type)) != kOk) {
    return runtime_failure("aoti_torch_get_device_type", error);
  }
  if ((error = aoti_torch_get_device_index(self, &device)) != kOk) {
    return runtime_failure("aoti_torch_get_device_index", error);
  }
  if (device_type != aoti_torch_device_type_cuda()) {
    std::fprintf(stderr, "%s: self is not a CUDA tensor (device type %d)\n", kShim, static_cast<int>(device_type));
    return kInvalidArgument;
  }
  if (ndim < 0 || ndim > kMaxDims) {
    std::fprintf(stderr, "%s: %lld dimensions; at most %d are supported (as ATen's CUDA nonzero)\n", kShim,
                 static_cast<long long>(ndim), kMaxDims);
    return kNotSupported;
  }
  Geometry g{};
  g.ndim = static_cast<int>(ndim);
  int64_t numel = 1;
  int64_t expected_stride = 1;
  g.contiguous = true;
  for (int d = g.ndim - 1; d >= 0; --d) {
    if (sizes[d] < 0) {
      std::fprintf(stderr, "%s: negative size %lld\n", kShim, static_cast<long long>(sizes[d]));
      return kInvalidArgument;
    }
    g.sizes[d] = sizes[d];
    g.strides[d] = strides[d];
    if (sizes[d] != 1 && strides[d] != expected_stride) g.contiguous = false;
    expected_stride *= sizes[d];
    numel *= sizes[d];
  }
  using Handler = AOTITorchError (*)(const void*, const Geometry&, int64_t, int32_t, cudaStream_t, AtenTensorHandle*);
  Handler handler = nullptr;
  if (dtype == aoti_torch_dtype_float32()) handler = nonzero_typed<float>;
  else if (dtype == aoti_torch_dtype_float16()) handler = nonzero_typed<HalfBits>;
  else if (dtype == aoti_torch_dtype_bfloat16()) handler = nonzero_typed<BFloat16Bits>;
  else if (dtype == aoti_torch_dtype_int64()) handler = nonzero_typed<int64_t>;
  else if (dtype == aoti_torch_dtype_int32()) handler = nonzero_typed<int32_t>;
  else if (dtype == aoti_torch_dtype_int16()) handler = nonzero_typed<int16_t>;
  else if (dtype == aoti_torch_dtype_int8()) handler = nonzero_typed<int8_t>;
  else if (dtype == aoti_torch_dtype_uint8()) handler = nonzero_typed<uint8_t>;
  else if (dtype == aoti_torch_dtype_bool()) handler = nonzero_typed<uint8_t>;  // one byte, 0 or 1
  else if (dtype == kDoubleCode) handler = nonzero_typed<double>;
  if (handler == nullptr) {
    std::fprintf(stderr, "%s: dtype code %d is not supported (float32, float16, bfloat16, float64, int64, int32, "
                 "int16, int8, uint8, bool are)\n", kShim, static_cast<int>(dtype));
    return kNotSupported;
  }
  DeviceScope scope(device);
  if (!scope.ok()) {
    std::fprintf(stderr, "%s: could not make CUDA device %d current\n", kShim, static_cast<int>(device));
    return kInternal;
  }
  if (numel == 0) return empty_result(ndim, device, ret0);
  if (data == nullptr) {
    std::fprintf(stderr, "%s: self has %lld elements but no data\n", kShim, static_cast<long long>(numel));
    return kInvalidArgument;
  }
  void* stream = nullptr;
  if ((error = aoti_torch_get_current_cuda_stream(device, &stream)) != kOk) {
    return runtime_failure("aoti_torch_get_current_cuda_stream", error);
  }
  return handler(data, g, numel, device, static_cast<cudaStream_t>(stream), ret0);
}
