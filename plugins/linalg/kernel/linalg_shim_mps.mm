// The c-shims of shimkit's linear-algebra ops for ExecuTorch's Metal runtime: aoti_torch_mps_shimkit_lu_factor,
// _lu_solve, _cholesky, _eigh, _svd, _qr and _ldl_factor allocate their results and dispatch lu_factor.metal,
// lu_solve.metal, cholesky.metal, eigh.metal, svd.metal, qr.metal and ldl_factor.metal exactly as the
// plugin's launch_* functions do on Linux through shimkit.metal (where the kernels are tested);
// aoti_torch_mps_shimkit_linalg_check_errors is ATen's _linalg_check_errors on the host.
//
// NOT COMPILED OR RUN ON LINUX, and not built or run by shimkit's CI (no Mac was available): it is written
// against executorch/backends/apple/metal/runtime (v1.5.1)'s ETMetalShaderLibrary and aoti_torch_empty_strided,
// the pattern of the runtime's own shims and of plugins/sort/kernel/sort_shim_mps.mm. The MSL sources are the
// strings the registry-generated adapter file defines (shimkit config mps --msl-adapter FILE).
#if __has_include(<executorch/backends/apple/metal/runtime/shims/et_metal.h>)

#include <executorch/backends/aoti/common_shims.h>
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

extern "C" const char shimkit_msl_source_lu_factor[];
extern "C" const char shimkit_msl_source_lu_solve[];
extern "C" const char shimkit_msl_source_cholesky[];
extern "C" const char shimkit_msl_source_eigh[];
extern "C" const char shimkit_msl_source_svd[];
extern "C" const char shimkit_msl_source_qr[];
extern "C" const char shimkit_msl_source_ldl_factor[];

namespace {

namespace aoti_api = executorch::backends::aoti;
namespace metal_api = executorch::backends::metal;  // ETMetalShaderLibrary, synchronize_metal_stream (et_metal.h)
using executorch::runtime::Error;
using ETensor = executorch::runtime::etensor::Tensor;

constexpr int32_t kFloat = 6;
constexpr int32_t kInt = 3;

bool is_contiguous(const ETensor& t) {
  int64_t expected = 1;
  for (int d = t.dim() - 1; d >= 0; --d) {
    if (t.size(d) != 1 && t.strides()[d] != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

// A contiguous float32 batch of matrices, or the reason it is not one (logged under `shim`).
bool check_matrices(const char* shim, const char* argument, const ETensor& t) {
  if (t.dim() < 2) {
    ET_LOG(Error, "%s: %s must be a batch of matrices (2 or more dims), got %d dims", shim, argument,
           static_cast<int>(t.dim()));
    return false;
  }
  if (static_cast<int32_t>(t.scalar_type()) != kFloat) {
    ET_LOG(Error, "%s: %s must be float32, got dtype %d", shim, argument, static_cast<int>(t.scalar_type()));
    return false;
  }
  if (!is_contiguous(t)) {
    ET_LOG(Error, "%s: %s must be contiguous", shim, argument);
    return false;
  }
  return true;
}

int64_t batch_count(const ETensor& t, int64_t core_dims) {
  int64_t count = 1;
  for (int64_t d = 0; d < t.dim() - core_dims; ++d) count *= t.size(d);
  return count;
}

// A contiguous tensor of `sizes` and `dtype` on `like`'s device.
Error allocate(AOTITensorHandle like, const std::vector<int64_t>& sizes, int32_t dtype, AOTITensorHandle* out) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  int32_t device_type = 0;
  aoti_api::aoti_torch_get_device_type(like, &device_type);
  return aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), dtype,
                                  device_type, 0, out);
}

void release(std::initializer_list<AOTITensorHandle> handles) {
  for (AOTITensorHandle handle : handles) {
    if (handle != nullptr) aoti_torch_delete_tensor_object(handle);
  }
}

std::shared_ptr<metal_api::ETMetalKernelFunction> kernel_of(const char* source, const char* name) {
  // One library per kernel source, compiled on first use like the runtime's own shims.
  static std::unique_ptr<metal_api::ETMetalShaderLibrary> lu_factor_library;
  static std::unique_ptr<metal_api::ETMetalShaderLibrary> lu_solve_library;
  static std::unique_ptr<metal_api::ETMetalShaderLibrary> cholesky_library;
  std::unique_ptr<metal_api::ETMetalShaderLibrary>* library =
      source == shimkit_msl_source_lu_factor ? &lu_factor_library
      : source == shimkit_msl_source_lu_solve ? &lu_solve_library
                                              : &cholesky_library;
  if (!*library) library->reset(new metal_api::ETMetalShaderLibrary(std::string(source)));
  return (*library)->getKernelFunction(name);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_shimkit_lu_factor(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                           AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_shimkit_lu_factor";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr || ret2 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t rank = input->dim();
  const int64_t m = input->size(rank - 2);
  const int64_t n = input->size(rank - 1);
  const int64_t k = m < n ? m : n;
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  std::vector<int64_t> pivot_sizes(batch);
  pivot_sizes.push_back(k);
  AOTITensorHandle lu = nullptr, pivots = nullptr, info = nullptr;
  if (allocate(A, std::vector<int64_t>(input->sizes().begin(), input->sizes().end()), kFloat, &lu) != Error::Ok ||
      allocate(A, pivot_sizes, kInt, &pivots) != Error::Ok || allocate(A, batch, kInt, &info) != Error::Ok) {
    release({lu, pivots, info});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0) {
    auto kernel = kernel_of(shimkit_msl_source_lu_factor, "lu_factor_float");
    if (!kernel) {
      release({lu, pivots, info});
      ET_LOG(Error, "%s: the MSL library has no lu_factor_float", shim);
      return Error::NotSupported;
    }
    // An empty matrix has nothing to factor: the kernel still runs, to write info = 0.
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(lu));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(pivots));
      kernel->setArg(2, *reinterpret_cast<ETensor*>(info));
      kernel->setArg(3, *input);
      kernel->setArg(4, m);
      kernel->setArg(5, n);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
  }
  *ret0 = lu;
  *ret1 = pivots;
  *ret2 = info;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_lu_solve(AOTITensorHandle LU, AOTITensorHandle pivots,
                                                          AOTITensorHandle B, int32_t adjoint,
                                                          AOTITensorHandle* ret0) {
  const char* shim = "aoti_torch_mps_shimkit_lu_solve";
  if (LU == nullptr || pivots == nullptr || B == nullptr || ret0 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* lu = reinterpret_cast<ETensor*>(LU);
  auto* rhs = reinterpret_cast<ETensor*>(B);
  auto* swaps = reinterpret_cast<ETensor*>(pivots);
  if (!check_matrices(shim, "LU", *lu) || !check_matrices(shim, "B", *rhs)) return Error::InvalidArgument;
  const int64_t n = lu->size(lu->dim() - 1);
  const int64_t k = rhs->size(rhs->dim() - 1);
  const int64_t matrices = batch_count(*lu, 2);
  if (lu->size(lu->dim() - 2) != n || rhs->dim() != lu->dim() || rhs->size(rhs->dim() - 2) != n ||
      batch_count(*rhs, 2) != matrices || swaps->dim() != lu->dim() - 1 || batch_count(*swaps, 1) != matrices ||
      swaps->size(swaps->dim() - 1) != n || static_cast<int32_t>(swaps->scalar_type()) != kInt ||
      !is_contiguous(*swaps)) {
    ET_LOG(Error, "%s: expected LU [*, n, n], contiguous int32 pivots [*, n] and B [*, n, k] with one batch", shim);
    return Error::InvalidArgument;
  }
  AOTITensorHandle x = nullptr;
  if (allocate(B, std::vector<int64_t>(rhs->sizes().begin(), rhs->sizes().end()), kFloat, &x) != Error::Ok) {
    ET_LOG(Error, "%s: could not allocate the result", shim);
    return Error::MemoryAllocationFailed;
  }
  if (matrices > 0 && n > 0 && k > 0) {
    auto kernel = kernel_of(shimkit_msl_source_lu_solve, "lu_solve_float");
    if (!kernel) {
      release({x});
      ET_LOG(Error, "%s: the MSL library has no lu_solve_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(x));
      kernel->setArg(1, *lu);
      kernel->setArg(2, *swaps);
      kernel->setArg(3, *rhs);
      kernel->setArg(4, n);
      kernel->setArg(5, k);
      kernel->setArg(6, static_cast<int64_t>(adjoint != 0));
      kernel->dispatchSingle(static_cast<uint64_t>(matrices * k));
    });
  }
  *ret0 = x;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_cholesky(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                          AOTITensorHandle* ret1) {
  const char* shim = "aoti_torch_mps_shimkit_cholesky";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t n = input->size(input->dim() - 1);
  if (input->size(input->dim() - 2) != n) {
    ET_LOG(Error, "%s: A must be batches of square matrices", shim);
    return Error::InvalidArgument;
  }
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  AOTITensorHandle l = nullptr, info = nullptr;
  if (allocate(A, std::vector<int64_t>(input->sizes().begin(), input->sizes().end()), kFloat, &l) != Error::Ok ||
      allocate(A, batch, kInt, &info) != Error::Ok) {
    release({l, info});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0) {
    auto kernel = kernel_of(shimkit_msl_source_cholesky, "cholesky_float");
    if (!kernel) {
      release({l, info});
      ET_LOG(Error, "%s: the MSL library has no cholesky_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(l));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(info));
      kernel->setArg(2, *input);
      kernel->setArg(3, n);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
  }
  *ret0 = l;
  *ret1 = info;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_eigh(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                      AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_shimkit_eigh";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr || ret2 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t n = input->size(input->dim() - 1);
  if (input->size(input->dim() - 2) != n) {
    ET_LOG(Error, "%s: A must be batches of square matrices", shim);
    return Error::InvalidArgument;
  }
  std::vector<int64_t> matrices_shape(input->sizes().begin(), input->sizes().end());
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  std::vector<int64_t> values_shape(batch);
  values_shape.push_back(n);
  AOTITensorHandle values = nullptr, vectors = nullptr, info = nullptr, work = nullptr;
  if (allocate(A, values_shape, kFloat, &values) != Error::Ok ||
      allocate(A, matrices_shape, kFloat, &vectors) != Error::Ok || allocate(A, batch, kInt, &info) != Error::Ok ||
      allocate(A, matrices_shape, kFloat, &work) != Error::Ok) {
    release({values, vectors, info, work});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0) {
    auto kernel = kernel_of(shimkit_msl_source_eigh, "eigh_float");
    if (!kernel) {
      release({values, vectors, info, work});
      ET_LOG(Error, "%s: the MSL library has no eigh_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(values));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(vectors));
      kernel->setArg(2, *reinterpret_cast<ETensor*>(info));
      kernel->setArg(3, *reinterpret_cast<ETensor*>(work));
      kernel->setArg(4, *input);
      kernel->setArg(5, n);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
    // The scratch matrices are freed below: the dispatch must be done with them first.
    metal_api::synchronize_metal_stream();
  }
  release({work});
  *ret0 = values;
  *ret1 = vectors;
  *ret2 = info;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_svd(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                     AOTITensorHandle* ret1, AOTITensorHandle* ret2,
                                                     AOTITensorHandle* ret3) {
  const char* shim = "aoti_torch_mps_shimkit_svd";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr || ret2 == nullptr || ret3 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t m = input->size(input->dim() - 2);
  const int64_t n = input->size(input->dim() - 1);
  if (m < n) {
    ET_LOG(Error, "%s: A must be tall (m >= n); the decomposition passes a wide matrix transposed", shim);
    return Error::InvalidArgument;
  }
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  std::vector<int64_t> u_shape(input->sizes().begin(), input->sizes().end());
  std::vector<int64_t> s_shape(batch), vh_shape(batch);
  s_shape.push_back(n);
  vh_shape.push_back(n);
  vh_shape.push_back(n);
  AOTITensorHandle u = nullptr, s = nullptr, vh = nullptr, info = nullptr;
  if (allocate(A, u_shape, kFloat, &u) != Error::Ok || allocate(A, s_shape, kFloat, &s) != Error::Ok ||
      allocate(A, vh_shape, kFloat, &vh) != Error::Ok || allocate(A, batch, kInt, &info) != Error::Ok) {
    release({u, s, vh, info});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0 && m > 0 && n > 0) {
    auto kernel = kernel_of(shimkit_msl_source_svd, "svd_float");
    if (!kernel) {
      release({u, s, vh, info});
      ET_LOG(Error, "%s: the MSL library has no svd_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(u));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(s));
      kernel->setArg(2, *reinterpret_cast<ETensor*>(vh));
      kernel->setArg(3, *reinterpret_cast<ETensor*>(info));
      kernel->setArg(4, *input);
      kernel->setArg(5, m);
      kernel->setArg(6, n);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
  } else {
    // No entries: no singular values, and Vh is the identity of its (possibly empty) order, as LAPACK's.
    metal_api::synchronize_metal_stream();
    auto* vh_tensor = reinterpret_cast<ETensor*>(vh);
    float* identity = vh_tensor->mutable_data_ptr<float>();
    for (int64_t b = 0; b < matrices; ++b) {
      for (int64_t i = 0; i < n * n; ++i) identity[b * n * n + i] = (i % (n + 1) == 0) ? 1.0f : 0.0f;
    }
    std::fill_n(reinterpret_cast<ETensor*>(info)->mutable_data_ptr<int32_t>(), matrices, 0);
  }
  *ret0 = u;
  *ret1 = s;
  *ret2 = vh;
  *ret3 = info;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_qr(AOTITensorHandle A, int32_t complete, AOTITensorHandle* ret0,
                                                    AOTITensorHandle* ret1) {
  const char* shim = "aoti_torch_mps_shimkit_qr";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t m = input->size(input->dim() - 2);
  const int64_t n = input->size(input->dim() - 1);
  const int64_t k = std::min(m, n);
  const int64_t columns = complete ? m : k;
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  std::vector<int64_t> q_shape(batch), r_shape(batch), tau_shape(batch);
  q_shape.insert(q_shape.end(), {m, columns});
  r_shape.insert(r_shape.end(), {columns, n});
  tau_shape.push_back(k);
  AOTITensorHandle q = nullptr, r = nullptr, work = nullptr, tau = nullptr;
  if (allocate(A, q_shape, kFloat, &q) != Error::Ok || allocate(A, r_shape, kFloat, &r) != Error::Ok ||
      allocate(A, std::vector<int64_t>(input->sizes().begin(), input->sizes().end()), kFloat, &work) != Error::Ok ||
      allocate(A, tau_shape, kFloat, &tau) != Error::Ok) {
    release({q, r, work, tau});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0 && m > 0 && n > 0) {
    auto kernel = kernel_of(shimkit_msl_source_qr, "qr_float");
    if (!kernel) {
      release({q, r, work, tau});
      ET_LOG(Error, "%s: the MSL library has no qr_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(q));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(r));
      kernel->setArg(2, *reinterpret_cast<ETensor*>(work));
      kernel->setArg(3, *reinterpret_cast<ETensor*>(tau));
      kernel->setArg(4, *input);
      kernel->setArg(5, m);
      kernel->setArg(6, n);
      kernel->setArg(7, columns);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
  }
  // The scratch is freed below: the dispatch must be done with it first; without entries, Q is the
  // identity's first columns and R is zero, written on the host.
  metal_api::synchronize_metal_stream();
  if (!(matrices > 0 && m > 0 && n > 0)) {
    float* q_data = reinterpret_cast<ETensor*>(q)->mutable_data_ptr<float>();
    for (int64_t b = 0; b < matrices; ++b) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < columns; ++c) q_data[(b * m + i) * columns + c] = i == c ? 1.0f : 0.0f;
      }
    }
    auto* r_tensor = reinterpret_cast<ETensor*>(r);
    std::fill_n(r_tensor->mutable_data_ptr<float>(), r_tensor->numel(), 0.0f);
  }
  release({work, tau});
  *ret0 = q;
  *ret1 = r;
  return Error::Ok;
}

extern "C" AOTITorchError aoti_torch_mps_shimkit_ldl_factor(AOTITensorHandle A, AOTITensorHandle* ret0,
                                                            AOTITensorHandle* ret1, AOTITensorHandle* ret2) {
  const char* shim = "aoti_torch_mps_shimkit_ldl_factor";
  if (A == nullptr || ret0 == nullptr || ret1 == nullptr || ret2 == nullptr) {
    ET_LOG(Error, "%s: null tensor handle", shim);
    return Error::InvalidArgument;
  }
  auto* input = reinterpret_cast<ETensor*>(A);
  if (!check_matrices(shim, "A", *input)) return Error::InvalidArgument;
  const int64_t n = input->size(input->dim() - 1);
  if (input->size(input->dim() - 2) != n) {
    ET_LOG(Error, "%s: A must be batches of square matrices", shim);
    return Error::InvalidArgument;
  }
  std::vector<int64_t> batch(input->sizes().begin(), input->sizes().end() - 2);
  std::vector<int64_t> pivot_shape(input->sizes().begin(), input->sizes().end() - 1);
  AOTITensorHandle ld = nullptr, pivots = nullptr, info = nullptr;
  if (allocate(A, std::vector<int64_t>(input->sizes().begin(), input->sizes().end()), kFloat, &ld) != Error::Ok ||
      allocate(A, pivot_shape, kInt, &pivots) != Error::Ok || allocate(A, batch, kInt, &info) != Error::Ok) {
    release({ld, pivots, info});
    ET_LOG(Error, "%s: could not allocate the results", shim);
    return Error::MemoryAllocationFailed;
  }
  const int64_t matrices = batch_count(*input, 2);
  if (matrices > 0) {
    auto kernel = kernel_of(shimkit_msl_source_ldl_factor, "ldl_factor_float");
    if (!kernel) {
      release({ld, pivots, info});
      ET_LOG(Error, "%s: the MSL library has no ldl_factor_float", shim);
      return Error::NotSupported;
    }
    kernel->runCommandBlock([&] {
      kernel->startEncoding();
      kernel->setArg(0, *reinterpret_cast<ETensor*>(ld));
      kernel->setArg(1, *reinterpret_cast<ETensor*>(pivots));
      kernel->setArg(2, *reinterpret_cast<ETensor*>(info));
      kernel->setArg(3, *input);
      kernel->setArg(4, n);
      kernel->dispatchSingle(static_cast<uint64_t>(matrices));
    });
  }
  *ret0 = ld;
  *ret1 = pivots;
  *ret2 = info;
  return Error::Ok;
}

// ATen's _linalg_check_errors (aten/src/ATen/native/BatchLinearAlgebra.cpp): the first nonzero info, with
// its batch element unless is_matrix, in ATen's words for the api. Reading info waits for the GPU, as
// ATen's own check does on mps.
extern "C" AOTITorchError aoti_torch_mps_shimkit_linalg_check_errors(AOTITensorHandle info, const char* api_name,
                                                                     int32_t is_matrix) {
  const char* shim = "aoti_torch_mps_shimkit_linalg_check_errors";
  if (info == nullptr || api_name == nullptr) {
    ET_LOG(Error, "%s: null argument", shim);
    return Error::InvalidArgument;
  }
  auto* infos = reinterpret_cast<ETensor*>(info);
  if (static_cast<int32_t>(infos->scalar_type()) != kInt || !is_contiguous(*infos)) {
    ET_LOG(Error, "%s: info must be a contiguous int32 tensor", shim);
    return Error::InvalidArgument;
  }
  metal_api::synchronize_metal_stream();
  const int32_t* codes = infos->const_data_ptr<int32_t>();
  for (int64_t i = 0; i < infos->numel(); ++i) {
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

#endif
