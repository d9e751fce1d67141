// The c-shims of shimkit's linear-algebra ops for ExecuTorch's Metal runtime: aoti_torch_mps_lu_factor,
// _lu_solve, _cholesky, _eigh, _svd, _qr and _ldl_factor allocate their results and dispatch lu_factor.metal,
// lu_solve.metal, cholesky.metal, eigh.metal, svd.metal, qr.metal and ldl_factor.metal exactly as the
// plugin's launch_* functions do on Linux through shimkit.metal (where the kernels are tested);
// aoti_torch_mps_linalg_check_errors is ATen's _linalg_check_errors on the host.
//
// Compiled and run on Linux against the Metal runtime stand-in in runtime/native
// (tests/test_metal_runtime_adapters.py). The MSL sources are the strings the registry-generated adapter
// file defines (shimkit config mps --msl-adapter FILE).
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "shimkit/metal_adapter.h"

extern "C" const char shimkit_msl_source_lu_factor[];
extern "C" const char shimkit_msl_source_lu_solve[];
extern "C" const char shimkit_msl_source_cholesky[];
extern "C" const char shimkit_msl_source_eigh[];
extern "C" const char shimkit_msl_source_svd[];
extern "C" const char shimkit_msl_source_qr[];
extern "C" const char shimkit_msl_source_ldl_factor[];

// In the runtime's namespace, as its own shims: AOTITensorHandle, Tensor, aoti_torch_empty_strided.
namespace executorch {
namespace backends {
namespace metal {
namespace {

using shimkit::is_contiguous;
using shimkit::scalar_types::kFloat32;
using shimkit::scalar_types::kInt32;
using shimkit_adapter::non_null;

// A contiguous float32 batch of matrices, square ones if `square`, or the reason it is not one (logged
// under `shim`).
bool check_matrices(const char* shim, const char* argument, const Tensor& t, bool square = false) {
  if (t.dim() < 2) {
    ET_LOG(Error, "%s: %s must be a batch of matrices (2 or more dims), got %d dims", shim, argument,
           static_cast<int>(t.dim()));
    return false;
  }
  if (static_cast<int32_t>(t.scalar_type()) != kFloat32) {
    ET_LOG(Error, "%s: %s must be float32, got dtype %d", shim, argument, static_cast<int>(t.scalar_type()));
    return false;
  }
  if (!shimkit_adapter::check_contiguous(shim, argument, t)) return false;
  if (square && t.size(t.dim() - 2) != t.size(t.dim() - 1)) {
    ET_LOG(Error, "%s: %s must be batches of square matrices", shim, argument);
    return false;
  }
  return true;
}

int64_t batch_count(const Tensor& t, int64_t core_dims) {
  int64_t count = 1;
  for (int64_t d = 0; d < t.dim() - core_dims; ++d) count *= t.size(d);
  return count;
}

// `t`'s sizes without its last `drop` dimensions, followed by `extra`.
std::vector<int64_t> shape(const Tensor& t, int64_t drop, std::initializer_list<int64_t> extra = {}) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end() - drop);
  sizes.insert(sizes.end(), extra);
  return sizes;
}

// Frees the tensors and clears their handles, so that no caller is left holding a freed one.
void release(std::initializer_list<AOTITensorHandle*> handles) {
  for (AOTITensorHandle* handle : handles) {
    if (*handle != nullptr) aoti_torch_delete_tensor_object(*handle);
    *handle = nullptr;
  }
}

// A contiguous tensor to allocate into *handle.
struct Result {
  std::vector<int64_t> sizes;
  int32_t dtype;
  AOTITensorHandle* handle;
};

// Allocates every result or, logged under `shim`, none.
bool allocate(const char* shim, std::initializer_list<Result> results) {
  for (const Result& result : results) *result.handle = nullptr;
  for (const Result& result : results) {
    if (shimkit_adapter::empty_contiguous(result.sizes, result.dtype, result.handle) != Error::Ok) {
      for (const Result& made : results) release({made.handle});
      ET_LOG(Error, "%s: could not allocate the results", shim);
      return false;
    }
  }
  return true;
}

// One library per MSL source, compiled on first use and kept for the process, like the runtime's own
// shims' libraries.
std::shared_ptr<ETMetalKernelFunction> kernel_of(const char* source, const char* name) {
  static std::mutex mutex;
  static std::unordered_map<const char*, std::unique_ptr<ETMetalShaderLibrary>> libraries;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ETMetalShaderLibrary>& library = libraries[source];
  if (!library) library.reset(new ETMetalShaderLibrary(source));
  return library->getKernelFunction(name);
}

// A kernel argument: a tensor's buffer, or a long.
struct Arg {
  Arg(Tensor* tensor) : tensor(tensor) {}
  Arg(int64_t value) : value(value) {}
  Tensor* tensor = nullptr;
  int64_t value = 0;
};

// Dispatches kernel `name` of `source` on `threads` threads with `args` at buffer indices 0, 1, ...;
// false, logged under `shim`, when the library has no such kernel.
bool run(const char* shim, const char* source, const char* name, std::initializer_list<Arg> args, int64_t threads) {
  std::shared_ptr<ETMetalKernelFunction> kernel = kernel_of(source, name);
  if (!kernel) {
    ET_LOG(Error, "%s: the MSL library has no %s", shim, name);
    return false;
  }
  kernel->runCommandBlock([&] {
    kernel->startEncoding();
    unsigned index = 0;
    for (const Arg& arg : args) {
      if (arg.tensor != nullptr) {
        kernel->setArg(index++, *arg.tensor);
      } else {
        kernel->setArg(index++, arg.value);
      }
    }
    kernel->dispatchSingle(static_cast<uint64_t>(threads));
  });
  return true;
}

// Writes each of the `matrices` [rows, columns] matrices of `t` as the identity's first columns, on the
// host. It waits for the queued work first: a new result can reuse a buffer that work still uses (the
// runtime pools its buffers).
void host_identity(Tensor& t, int64_t matrices, int64_t rows, int64_t columns) {
  synchronize_metal_stream();
  float* data = t.mutable_data_ptr<float>();
  for (int64_t b = 0; b < matrices; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < columns; ++c) data[(b * rows + i) * columns + c] = i == c ? 1.0f : 0.0f;
    }
  }
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_lu_factor(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                   AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_lu_factor";
  if (!non_null(shim, {A, ret0, ret1, ret2}) || !check_matrices(shim, "A", *A)) return Error::InvalidArgument;
  const int64_t m = A->size(A->dim() - 2);
  const int64_t n = A->size(A->dim() - 1);
  AOTITensorHandle &lu = *ret0, &pivots = *ret1, &info = *ret2;
  if (!allocate(shim, {{shape(*A, 0), kFloat32, &lu}, {shape(*A, 2, {std::min(m, n)}), kInt32, &pivots},
                       {shape(*A, 2), kInt32, &info}})) {
    return Error::MemoryAllocationFailed;
  }
  // An empty matrix has nothing to factor: the kernel still runs, to write info = 0.
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0 && !run(shim, shimkit_msl_source_lu_factor, "lu_factor_float", {lu, pivots, info, A, m, n},
                           matrices)) {
    release({&lu, &pivots, &info});
    return Error::NotSupported;
  }
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_lu_solve(AOTITensorHandle LU, AOTITensorHandle pivots,
                                                  AOTITensorHandle B, int32_t adjoint,
                                                  AOTITensorHandle* ret0) {
  const char* shim = "aoti_torch_mps_lu_solve";
  if (!non_null(shim, {LU, pivots, B, ret0}) || !check_matrices(shim, "LU", *LU, /*square=*/true) ||
      !check_matrices(shim, "B", *B)) {
    return Error::InvalidArgument;
  }
  const int64_t n = LU->size(LU->dim() - 1);
  const int64_t k = B->size(B->dim() - 1);
  if (shape(*B, 2) != shape(*LU, 2) || B->size(B->dim() - 2) != n || shape(*pivots, 0) != shape(*LU, 1) ||
      static_cast<int32_t>(pivots->scalar_type()) != kInt32 || !is_contiguous(*pivots)) {
    ET_LOG(Error, "%s: expected LU [*, n, n], contiguous int32 pivots [*, n] and B [*, n, k] with one batch", shim);
    return Error::InvalidArgument;
  }
  AOTITensorHandle& x = *ret0;
  if (!allocate(shim, {{shape(*B, 0), kFloat32, &x}})) return Error::MemoryAllocationFailed;
  const int64_t matrices = batch_count(*LU, 2);
  if (matrices > 0 && n > 0 && k > 0 &&
      !run(shim, shimkit_msl_source_lu_solve, "lu_solve_float",
           {x, LU, pivots, B, n, k, static_cast<int64_t>(adjoint != 0)}, matrices * k)) {
    release({&x});
    return Error::NotSupported;
  }
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_cholesky(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                  AOTITensorHandle* ret1) {
  const char* shim = "aoti_torch_mps_cholesky";
  if (!non_null(shim, {A, ret0, ret1}) || !check_matrices(shim, "A", *A, /*square=*/true)) {
    return Error::InvalidArgument;
  }
  const int64_t n = A->size(A->dim() - 1);
  AOTITensorHandle &l = *ret0, &info = *ret1;
  if (!allocate(shim, {{shape(*A, 0), kFloat32, &l}, {shape(*A, 2), kInt32, &info}})) {
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0 && !run(shim, shimkit_msl_source_cholesky, "cholesky_float", {l, info, A, n}, matrices)) {
    release({&l, &info});
    return Error::NotSupported;
  }
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_eigh(AOTITensorHandle A, AOTITensorHandle* ret0,
                                              AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_eigh";
  if (!non_null(shim, {A, ret0, ret1, ret2}) || !check_matrices(shim, "A", *A, /*square=*/true)) {
    return Error::InvalidArgument;
  }
  const int64_t n = A->size(A->dim() - 1);
  AOTITensorHandle &values = *ret0, &vectors = *ret1, &info = *ret2;
  AOTITensorHandle work = nullptr;
  if (!allocate(shim, {{shape(*A, 2, {n}), kFloat32, &values}, {shape(*A, 0), kFloat32, &vectors},
                       {shape(*A, 2), kInt32, &info}, {shape(*A, 0), kFloat32, &work}})) {
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0) {
    if (!run(shim, shimkit_msl_source_eigh, "eigh_float", {values, vectors, info, work, A, n}, matrices)) {
      release({&values, &vectors, &info, &work});
      return Error::NotSupported;
    }
    // The scratch matrices are freed below: the dispatch must be done with them first.
    synchronize_metal_stream();
  }
  release({&work});
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_svd(AOTITensorHandle A, AOTITensorHandle* ret0,
                                             AOTITensorHandle* ret1, AOTITensorHandle* ret2,
                                             AOTITensorHandle* ret3) {
  const char* shim = "aoti_torch_mps_svd";
  if (!non_null(shim, {A, ret0, ret1, ret2, ret3}) || !check_matrices(shim, "A", *A)) return Error::InvalidArgument;
  const int64_t m = A->size(A->dim() - 2);
  const int64_t n = A->size(A->dim() - 1);
  if (m < n) {
    ET_LOG(Error, "%s: A must be tall (m >= n); the decomposition passes a wide matrix transposed", shim);
    return Error::InvalidArgument;
  }
  AOTITensorHandle &u = *ret0, &s = *ret1, &vh = *ret2, &info = *ret3;
  if (!allocate(shim, {{shape(*A, 0), kFloat32, &u}, {shape(*A, 2, {n}), kFloat32, &s},
                       {shape(*A, 2, {n, n}), kFloat32, &vh}, {shape(*A, 2), kInt32, &info}})) {
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0 && m > 0 && n > 0) {
    if (!run(shim, shimkit_msl_source_svd, "svd_float", {u, s, vh, info, A, m, n}, matrices)) {
      release({&u, &s, &vh, &info});
      return Error::NotSupported;
    }
    return Error::Ok;
  }
  // No entries: no singular values, and Vh is the identity of its (possibly empty) order, as LAPACK's.
  host_identity(*vh, matrices, n, n);
  std::fill_n(info->mutable_data_ptr<int32_t>(), matrices, 0);
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_qr(AOTITensorHandle A, int32_t complete, AOTITensorHandle* ret0,
                                            AOTITensorHandle* ret1) {
  const char* shim = "aoti_torch_mps_qr";
  if (!non_null(shim, {A, ret0, ret1}) || !check_matrices(shim, "A", *A)) return Error::InvalidArgument;
  const int64_t m = A->size(A->dim() - 2);
  const int64_t n = A->size(A->dim() - 1);
  const int64_t k = std::min(m, n);
  const int64_t columns = complete ? m : k;
  AOTITensorHandle &q = *ret0, &r = *ret1;
  AOTITensorHandle work = nullptr, tau = nullptr;
  if (!allocate(shim, {{shape(*A, 2, {m, columns}), kFloat32, &q}, {shape(*A, 2, {columns, n}), kFloat32, &r},
                       {shape(*A, 0), kFloat32, &work}, {shape(*A, 2, {k}), kFloat32, &tau}})) {
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0 && m > 0 && n > 0) {
    if (!run(shim, shimkit_msl_source_qr, "qr_float", {q, r, work, tau, A, m, n, columns}, matrices)) {
      release({&q, &r, &work, &tau});
      return Error::NotSupported;
    }
    // The scratch is freed below: the dispatch must be done with it first.
    synchronize_metal_stream();
  } else {
    // No entries to reflect: Q is the identity's first columns and R is zero.
    host_identity(*q, matrices, m, columns);
    std::fill_n(r->mutable_data_ptr<float>(), r->numel(), 0.0f);
  }
  release({&work, &tau});
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_ldl_factor(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                    AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_ldl_factor";
  if (!non_null(shim, {A, ret0, ret1, ret2}) || !check_matrices(shim, "A", *A, /*square=*/true)) {
    return Error::InvalidArgument;
  }
  const int64_t n = A->size(A->dim() - 1);
  AOTITensorHandle &ld = *ret0, &pivots = *ret1, &info = *ret2;
  if (!allocate(shim, {{shape(*A, 0), kFloat32, &ld}, {shape(*A, 1), kInt32, &pivots},
                       {shape(*A, 2), kInt32, &info}})) {
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*A, 2);
  if (matrices > 0 && !run(shim, shimkit_msl_source_ldl_factor, "ldl_factor_float", {ld, pivots, info, A, n},
                           matrices)) {
    release({&ld, &pivots, &info});
    return Error::NotSupported;
  }
  return Error::Ok;
}

// ATen's _linalg_check_errors (aten/src/ATen/native/BatchLinearAlgebra.cpp): the first nonzero info, with
// its batch element unless is_matrix, in ATen's words for the api. Reading info waits for the GPU, as
// ATen's own check does on mps.
// `none` stands for the op's None result: Inductor passes every fallback's outputs, nullptr for a None.
extern "C" AOTITorchError aoti_torch_mps_linalg_check_errors(AOTITensorHandle info, const char* api_name,
                                                             int32_t is_matrix, AOTITensorHandle* none) {
  (void)none;
  const char* shim = "aoti_torch_mps_linalg_check_errors";
  if (info == nullptr || api_name == nullptr) {
    ET_LOG(Error, "%s: null argument", shim);
    return Error::InvalidArgument;
  }
  if (static_cast<int32_t>(info->scalar_type()) != kInt32 || !is_contiguous(*info)) {
    ET_LOG(Error, "%s: info must be a contiguous int32 tensor", shim);
    return Error::InvalidArgument;
  }
  synchronize_metal_stream();
  const int32_t* codes = info->const_data_ptr<int32_t>();
  for (int64_t i = 0; i < info->numel(); ++i) {
    const int32_t code = codes[i];
    if (code == 0) continue;
    const std::string api(api_name);
    const std::string batch = is_matrix != 0 ? "" : ": (Batch element " + std::to_string(i) + ")";
    if (code < 0) {
      ET_LOG(Error, "%s%s: Argument %d has illegal value.", api_name, batch.c_str(), -code);
    } else if (api.find("inv") != std::string::npos) {
      ET_LOG(Error, "%s%s: The diagonal element %d is zero, the inversion could not be completed because the "
             "input matrix is singular.", api_name, batch.c_str(), code);
    } else if (api.find("solve") != std::string::npos) {
      ET_LOG(Error, "%s%s: The solver failed because the input matrix is singular.", api_name, batch.c_str());
    } else if (api.find("cholesky") != std::string::npos) {
      ET_LOG(Error, "%s%s: The factorization could not be completed because the input is not positive-definite "
             "(the leading minor of order %d is not positive-definite).", api_name, batch.c_str(), code);
    } else {
      ET_LOG(Error, "%s%s: U[%d,%d] is zero and using it on lu_solve would result in a division by zero.",
             api_name, batch.c_str(), code, code);
    }
    return Error::InvalidArgument;
  }
  return Error::Ok;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch
