// torch's AOTI mps ABI (torch/csrc/inductor/aoti_torch/c/shim_mps.h) on the CPU, over the dispatch it
// shares with ExecuTorch's ETMetalKernelFunction (shimkit/metal_dispatch.h, metal_dispatch.cpp: MSL compiled
// by shimkit.metal through the resolver the host registers, run by its executor). "Device" memory is host
// memory.
//
// AOTInductor's generated wrapper ignores the codes of the encoding calls (set_arg_*, dispatch_*,
// run_command_block), so a failure there would pass silently: the first one is also kept as the
// program's failure, which the host reads after a run (shimkit_runtime_take_failure) and reports.

#include <torch/csrc/inductor/aoti_torch/c/shim_mps.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "runtime_errors.h"
#include "shimkit/metal_dispatch.h"

namespace runtime = shimkit::metal_runtime;

namespace {

runtime::Kernel* kernel_of(AOTIMetalKernelFunctionHandle handle) {
  return reinterpret_cast<runtime::Kernel*>(handle);
}

}  // namespace

extern "C" {

AOTITorchError aoti_torch_mps_create_shader_library(const char* metal_shader_source,
                                                    AOTIMetalShaderLibraryHandle* library_handle) {
  return runtime::guarded(__func__, [&] {
    *library_handle = reinterpret_cast<AOTIMetalShaderLibraryHandle>(runtime::create_library(metal_shader_source));
  });
}

AOTITorchError aoti_torch_mps_delete_shader_library(AOTIMetalShaderLibraryHandle library_handle) {
  return runtime::guarded(__func__, [&] {
    runtime::delete_library(reinterpret_cast<runtime::Library*>(library_handle));
  });
}

AOTITorchError aoti_torch_mps_get_kernel_function(AOTIMetalShaderLibraryHandle library_handle,
                                                  const char* kernel_name,
                                                  AOTIMetalKernelFunctionHandle* function_handle) {
  return runtime::guarded(__func__, [&] {
    *function_handle = reinterpret_cast<AOTIMetalKernelFunctionHandle>(
        runtime::get_kernel(reinterpret_cast<runtime::Library*>(library_handle), kernel_name));
  });
}

AOTITorchError aoti_torch_mps_start_encoding(AOTIMetalKernelFunctionHandle func) {
  return runtime::guarded(__func__, [&] { runtime::start_encoding(kernel_of(func)); });
}

AOTITorchError aoti_torch_mps_set_arg_tensor(AOTIMetalKernelFunctionHandle func, unsigned idx,
                                             AtenTensorHandle tensor) {
  return runtime::guarded(__func__, [&] {
    void* data = nullptr;
    if (aoti_torch_get_data_ptr(tensor, &data) != 0) {
      throw std::invalid_argument("argument " + std::to_string(idx) + " is not a tensor of this runtime");
    }
    runtime::set_buffer(kernel_of(func), idx, data);
  });
}

AOTITorchError aoti_torch_mps_set_arg_int(AOTIMetalKernelFunctionHandle func, unsigned idx, int64_t val) {
  return runtime::guarded(__func__, [&] { runtime::set_bytes(kernel_of(func), idx, &val, sizeof(val)); });
}

AOTITorchError aoti_torch_mps_dispatch_single(AOTIMetalKernelFunctionHandle func, uint64_t length) {
  return runtime::guarded(__func__, [&] { runtime::dispatch(kernel_of(func), &length, 1, nullptr, 0); });
}

AOTITorchError aoti_torch_mps_dispatch_single_with_group_size(AOTIMetalKernelFunctionHandle func, uint64_t length,
                                                              uint64_t group_size) {
  return runtime::guarded(__func__, [&] {
    // torch's MetalKernelFunction clips the group to the grid and to the pipeline's limit.
    const uint64_t group = std::max<uint64_t>(
        1, std::min({group_size == 0 ? length : group_size, length,
                     runtime::max_threads_per_threadgroup(kernel_of(func))}));
    runtime::dispatch(kernel_of(func), &length, 1, &group, 1);
  });
}

AOTITorchError aoti_torch_mps_dispatch_array(AOTIMetalKernelFunctionHandle func, const uint64_t* length,
                                             size_t length_size) {
  return runtime::guarded(__func__, [&] { runtime::dispatch(kernel_of(func), length, length_size, nullptr, 0); });
}

AOTITorchError aoti_torch_mps_dispatch_array_with_group_size(AOTIMetalKernelFunctionHandle func,
                                                             const uint64_t* length, size_t length_size,
                                                             const uint64_t* group_size, size_t group_size_size) {
  return runtime::guarded(__func__, [&] {
    runtime::dispatch(kernel_of(func), length, length_size, group_size, group_size_size);
  });
}

AOTITorchError aoti_torch_mps_malloc(void** buffer, size_t num_bytes) {
  return runtime::guarded(__func__, [&] {
    *buffer = std::calloc(std::max<size_t>(num_bytes, 1), 1);
    if (*buffer == nullptr) throw std::bad_alloc();
  });
}

AOTITorchError aoti_torch_mps_free(void* ptr) {
  std::free(ptr);
  return 0;
}

AOTITorchError aoti_torch_mps_memcpy(void* buffer, size_t constant_offset, size_t bytes_read, size_t data_size,
                                     uint8_t* constants_start) {
  return runtime::guarded(__func__, [&] {
    std::memcpy(static_cast<uint8_t*>(buffer) + constant_offset, constants_start + bytes_read, data_size);
  });
}

AOTITorchError aoti_torch_mps_copy_buffer(void* src_buffer, void* dst_buffer, size_t data_size, size_t src_offset,
                                          size_t dst_offset) {
  return runtime::guarded(__func__, [&] {
    std::memmove(static_cast<uint8_t*>(dst_buffer) + dst_offset, static_cast<uint8_t*>(src_buffer) + src_offset,
                 data_size);
  });
}

void aoti_torch_mps_shared_callback(AOTIMetalKernelFunctionHandle func, void* user_data) {
  (*static_cast<std::function<void(AOTIMetalKernelFunctionHandle)>*>(user_data))(func);
}

AOTITorchError aoti_torch_mps_run_command_block(AOTIMetalKernelFunctionHandle func,
                                                aoti_torch_mps_command_block_callback_t callback,
                                                void* user_data) {
  // The CPU runs each dispatch as it is encoded: the block has finished when this returns.
  return runtime::guarded(__func__, [&] { callback(func, user_data); });
}

}  // extern "C"

namespace {

// "<c-shim>\t<behaviour>\t<detail>" for each call, since the last take, on which upstream's runtime computes
// something other than ATen (the fallbacks reproduce it and say so): distinct, in the order first met.
std::mutex divergences_mutex;
std::vector<std::string> divergences;

}  // namespace

extern "C" {

// A fallback met a call on which it computes what upstream's runtime computes, not what ATen does: `behaviour` says
// what (the same text for every such call), `detail` this call's operand.
void shimkit_runtime_record_divergence(const char* symbol, const char* behaviour, const char* detail) {
  std::string line = std::string(symbol ? symbol : "?") + "\t" + (behaviour ? behaviour : "") + "\t" +
                     (detail ? detail : "");
  std::lock_guard<std::mutex> lock(divergences_mutex);
  if (std::find(divergences.begin(), divergences.end(), line) == divergences.end()) {
    divergences.push_back(std::move(line));
  }
}

// The divergences since the last call, one a line ("" if none), and forgets them. Returns the whole text's
// length: a caller whose buffer was too small asks again with one that fits (nothing is forgotten then).
size_t shimkit_runtime_take_divergences(char* text, size_t size) {
  std::lock_guard<std::mutex> lock(divergences_mutex);
  std::string joined;
  for (const std::string& line : divergences) joined += line + "\n";
  if (size > joined.size()) {
    std::memcpy(text, joined.data(), joined.size());
    text[joined.size()] = '\0';
    divergences.clear();
  } else if (size > 0) {
    text[0] = '\0';
  }
  return joined.size();
}

}  // extern "C"
