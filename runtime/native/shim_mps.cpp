// torch's AOTI mps ABI (torch/csrc/inductor/aoti_torch/c/shim_mps.h) on the CPU, and the dispatch it
// shares with ExecuTorch's ETMetalKernelFunction (shimkit/metal_dispatch.h). A shader library is MSL
// compiled by shimkit.metal: the host process registers a resolver (shimkit_runtime_set_resolver) that
// compiles a source and names, for each kernel, the shared library and the launcher to call; a dispatch
// calls that launcher with the bound arguments, and shimkit.metal's executor runs the grid as Metal's
// dispatchThreads does. "Device" memory is host memory.
//
// AOTInductor's generated wrapper ignores the codes of the encoding calls (set_arg_*, dispatch_*,
// run_command_block), so a failure there would pass silently: the first one is also kept as the
// program's failure, which the host reads after a run (shimkit_runtime_take_failure) and reports.

#include <torch/csrc/inductor/aoti_torch/c/shim_mps.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime_errors.h"
#include "shimkit/metal_dispatch.h"

namespace shimkit {
namespace metal_runtime {

// What a resolver answers: 0 and, for a kernel, "<shared library>\n<launcher index>\n<max threads per
// threadgroup>\n<buffer count>"; nonzero and the error text otherwise. With kernel == nullptr it only
// checks (and compiles) the library.
using Resolver = int (*)(const char* source, const char* kernel, char* reply, size_t reply_size);

namespace {

Resolver resolver = nullptr;
thread_local std::string last_error;
std::mutex failure_mutex;
std::string first_failure;
// "<c-shim>\t<behaviour>\t<detail>" for each call, since the last take, on which upstream's runtime computes something other
// than ATen (the fallbacks reproduce it and say so): distinct, in the order first met.
std::vector<std::string> divergences;

// shimkit.metal's launcher ABI (metal/frontend.py): arguments as pointers, the grid as below.
struct Grid {
  unsigned long threads[3];
  unsigned long group[3];
  int workers;
  int reverse = 0;
};
using Launch = int (*)(void**, Grid*);
using LastError = const char* (*)();

std::string resolve(const std::string& source, const char* kernel) {
  if (resolver == nullptr) {
    throw std::runtime_error("no MSL compiler is registered: load the runtime through shimkit.runtime.program");
  }
  std::vector<char> reply(1 << 16, '\0');
  const int status = resolver(source.c_str(), kernel, reply.data(), reply.size() - 1);
  std::string text(reply.data());
  if (status != 0) throw std::runtime_error(text.empty() ? "the MSL did not compile" : text);
  return text;
}

}  // namespace

struct Kernel {
  std::string name;
  Launch launch = nullptr;
  LastError launch_error = nullptr;
  uint64_t max_threads = 1024;
  std::vector<void*> arguments;
  std::vector<bool> bound;
  std::vector<std::array<unsigned char, 64>> values;  // setBytes arguments, padded as Metal pads them
};

struct Library {
  std::string source;
  std::mutex mutex;
  std::unordered_map<std::string, std::unique_ptr<Kernel>> kernels;
};

void set_last_error(std::string message) {
  {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (first_failure.empty()) first_failure = message;
  }
  last_error = std::move(message);
}

Library* create_library(const char* source) {
  if (source == nullptr) throw std::invalid_argument("null MSL source");
  auto library = std::make_unique<Library>();
  library->source = source;
  resolve(library->source, nullptr);
  return library.release();
}

void delete_library(Library* library) { delete library; }

Kernel* get_kernel(Library* library, const char* name) {
  if (library == nullptr || name == nullptr) throw std::invalid_argument("null library or kernel name");
  std::lock_guard<std::mutex> lock(library->mutex);
  auto& slot = library->kernels[name];
  if (slot) return slot.get();
  std::istringstream reply(resolve(library->source, name));
  std::string path;
  size_t index = 0, buffers = 0;
  auto kernel = std::make_unique<Kernel>();
  if (!std::getline(reply, path) || !(reply >> index >> kernel->max_threads >> buffers)) {
    library->kernels.erase(name);
    throw std::runtime_error(std::string("kernel '") + name + "': the resolver's reply is malformed");
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    library->kernels.erase(name);
    throw std::runtime_error(std::string("kernel '") + name + "': " + dlerror());
  }
  kernel->launch = reinterpret_cast<Launch>(dlsym(handle, ("shimkit_launch_" + std::to_string(index)).c_str()));
  kernel->launch_error = reinterpret_cast<LastError>(dlsym(handle, "shimkit_last_error"));
  if (kernel->launch == nullptr || kernel->launch_error == nullptr) {
    library->kernels.erase(name);
    throw std::runtime_error(std::string("kernel '") + name + "': " + path + " has no launcher " +
                             std::to_string(index));
  }
  kernel->name = name;
  kernel->arguments.assign(buffers, nullptr);
  kernel->bound.assign(buffers, false);
  kernel->values.resize(buffers);
  slot = std::move(kernel);
  return slot.get();
}

const char* kernel_name(const Kernel* kernel) { return kernel->name.c_str(); }

uint64_t max_threads_per_threadgroup(const Kernel* kernel) { return kernel->max_threads; }

void start_encoding(Kernel* kernel) {
  if (kernel == nullptr) throw std::invalid_argument("null kernel handle");
  std::fill(kernel->bound.begin(), kernel->bound.end(), false);
}

static void check_index(const Kernel* kernel, unsigned index) {
  if (index >= kernel->arguments.size()) {
    throw std::invalid_argument("kernel '" + kernel->name + "' takes " + std::to_string(kernel->arguments.size()) +
                                " buffer argument(s); index " + std::to_string(index) + " is out of range");
  }
}

void set_buffer(Kernel* kernel, unsigned index, void* data) {
  if (kernel == nullptr) throw std::invalid_argument("null kernel handle");
  check_index(kernel, index);
  kernel->arguments[index] = data;
  kernel->bound[index] = true;
}

void set_bytes(Kernel* kernel, unsigned index, const void* data, size_t size) {
  if (kernel == nullptr) throw std::invalid_argument("null kernel handle");
  check_index(kernel, index);
  auto& value = kernel->values[index];
  if (size > value.size()) {
    throw std::invalid_argument("kernel '" + kernel->name + "': argument " + std::to_string(index) + " of " +
                                std::to_string(size) + " bytes; setBytes values here hold at most " +
                                std::to_string(value.size()));
  }
  value.fill(0);
  std::memcpy(value.data(), data, size);
  kernel->arguments[index] = value.data();
  kernel->bound[index] = true;
}

static void run(Kernel* kernel, Grid grid) {
  for (size_t index = 0; index < kernel->bound.size(); ++index) {
    if (!kernel->bound[index]) {
      throw std::invalid_argument("kernel '" + kernel->name + "': argument " + std::to_string(index) +
                                  " was not set before the dispatch");
    }
  }
  uint64_t total = 1;
  for (int d = 0; d < 3; ++d) {
    if (grid.group[d] == 0) throw std::invalid_argument("kernel '" + kernel->name + "': a threadgroup size is 0");
    total *= grid.group[d];
  }
  if (total > kernel->max_threads) {
    throw std::invalid_argument("kernel '" + kernel->name + "': a threadgroup of " + std::to_string(total) +
                                " threads exceeds its max_total_threads_per_threadgroup (" +
                                std::to_string(kernel->max_threads) + ")");
  }
  grid.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (kernel->launch(kernel->arguments.data(), &grid) != 0) {
    throw std::runtime_error("kernel '" + kernel->name + "' failed: " + kernel->launch_error());
  }
}

void dispatch(Kernel* kernel, const uint64_t* threads, size_t threads_size, const uint64_t* group,
              size_t group_size) {
  if (kernel == nullptr || threads == nullptr) throw std::invalid_argument("null kernel handle or grid");
  if (threads_size < 1 || threads_size > 3 || (group != nullptr && group_size != threads_size)) {
    throw std::invalid_argument("kernel '" + kernel->name + "': a grid of " + std::to_string(threads_size) +
                                " dimension(s) with a group of " + std::to_string(group_size));
  }
  Grid grid{{1, 1, 1}, {1, 1, 1}, 1};
  for (size_t d = 0; d < threads_size; ++d) grid.threads[d] = threads[d];
  if (group != nullptr) {
    for (size_t d = 0; d < group_size; ++d) grid.group[d] = group[d];
  } else {
    grid.group[0] = std::max<uint64_t>(1, std::min<uint64_t>(threads[0], kernel->max_threads));
  }
  run(kernel, grid);
}

void dispatch_threadgroups(Kernel* kernel, const uint64_t grid_groups[3], const uint64_t group[3]) {
  if (kernel == nullptr) throw std::invalid_argument("null kernel handle");
  Grid grid{{1, 1, 1}, {1, 1, 1}, 1};
  for (int d = 0; d < 3; ++d) {
    grid.threads[d] = grid_groups[d] * group[d];
    grid.group[d] = group[d];
  }
  run(kernel, grid);
}

}  // namespace metal_runtime
}  // namespace shimkit

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

// The host process's side.
void shimkit_runtime_set_resolver(runtime::Resolver resolve) { runtime::resolver = resolve; }

const char* shimkit_runtime_last_error() { return runtime::last_error.c_str(); }

// Kernels that report through their own channel (the CPU fallbacks) record their failures here too.
void shimkit_runtime_record_failure(const char* message) { runtime::set_last_error(message ? message : ""); }

// A fallback met a call on which it computes what upstream's runtime computes, not what ATen does: `behaviour` says
// what (the same text for every such call), `detail` this call's operand.
void shimkit_runtime_record_divergence(const char* symbol, const char* behaviour, const char* detail) {
  std::string line = std::string(symbol ? symbol : "?") + "\t" + (behaviour ? behaviour : "") + "\t" +
                     (detail ? detail : "");
  std::lock_guard<std::mutex> lock(runtime::failure_mutex);
  if (std::find(runtime::divergences.begin(), runtime::divergences.end(), line) == runtime::divergences.end()) {
    runtime::divergences.push_back(std::move(line));
  }
}

// The divergences since the last call, one a line ("" if none), and forgets them. Returns the whole text's
// length: a caller whose buffer was too small asks again with one that fits (nothing is forgotten then).
size_t shimkit_runtime_take_divergences(char* text, size_t size) {
  std::lock_guard<std::mutex> lock(runtime::failure_mutex);
  std::string joined;
  for (const std::string& line : runtime::divergences) joined += line + "\n";
  if (size > joined.size()) {
    std::memcpy(text, joined.data(), joined.size());
    text[joined.size()] = '\0';
    runtime::divergences.clear();
  } else if (size > 0) {
    text[0] = '\0';
  }
  return joined.size();
}

// The first failure since the last call ("" if none), and forgets it.
size_t shimkit_runtime_take_failure(char* message, size_t size) {
  std::lock_guard<std::mutex> lock(runtime::failure_mutex);
  const size_t length = runtime::first_failure.size();
  if (size > 0) {
    const size_t copied = std::min(length, size - 1);
    std::memcpy(message, runtime::first_failure.data(), copied);
    message[copied] = '\0';
  }
  runtime::first_failure.clear();
  return length;
}

}  // extern "C"
