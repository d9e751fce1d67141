// Metal compute dispatch on the CPU (shimkit/metal_dispatch.h): a shader library is MSL compiled by
// shimkit.metal, reached through the resolver the host process registers (shimkit_runtime_set_resolver),
// which compiles a source and names, for each kernel, the shared library and the launcher to call; a
// dispatch calls that launcher with the bound arguments, and shimkit.metal's executor runs the grid as
// Metal's dispatchThreads does. "Device" memory is host memory.
//
// Its own unit so that both runtimes link it: the stand-in (over it, torch's AOTI mps ABI in shim_mps.cpp
// and ExecuTorch's ETMetalShaderLibrary in et_metal.cpp) and upstream's runtime built from its source tree
// (shimkit.runtime.upstream), whose et_metal.mm reaches it through shimkit.objc's Metal. The failure a host
// reads after a run (shimkit_runtime_take_failure) lives here too, for the same reason.

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime_errors.h"
#include "shimkit/metal_dispatch.h"
#include "shimkit/objc_hooks.h"

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

size_t buffer_argument_count(const Kernel* kernel) { return kernel->arguments.size(); }

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
  run_encoded_work();  // what the stream holds runs first: this runs at once
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
  run_encoded_work();  // what the stream holds runs first: this runs at once
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

extern "C" {

// The host process's side.
void shimkit_runtime_set_resolver(runtime::Resolver resolve) { runtime::resolver = resolve; }

const char* shimkit_runtime_last_error() { return runtime::last_error.c_str(); }

// Kernels that report through their own channel (the CPU fallbacks, upstream's ET_LOG errors) record their
// failures here too.
void shimkit_runtime_record_failure(const char* message) { runtime::set_last_error(message ? message : ""); }

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
