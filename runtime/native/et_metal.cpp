// ExecuTorch's ETMetalShaderLibrary / ETMetalKernelFunction / ETMetalStream API on the CPU, over
// shimkit/metal_dispatch.h (see et_metal.h for what differs from a Mac). The threadgroup sizes each
// dispatch method picks are upstream's, because a kernel that uses threadgroup memory or barriers
// computes differently with other group sizes.
#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>

#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "shimkit/metal_dispatch.h"
#include "runtime_errors.h"
#include "shimkit/objc_hooks.h"

namespace executorch {
namespace backends {
namespace metal {

namespace runtime = shimkit::metal_runtime;

ETMetalShaderLibrary::ETMetalShaderLibrary(const std::string& source) : library_(nullptr) {
  try {
    library_ = runtime::create_library(source.c_str());
  } catch (const std::exception& error) {
    ET_LOG(Error, "ETMetalShaderLibrary: the MSL source does not compile: %s", error.what());
  }
}

ETMetalShaderLibrary::~ETMetalShaderLibrary() {
  if (library_ != nullptr) runtime::delete_library(library_);
}

std::shared_ptr<ETMetalKernelFunction> ETMetalShaderLibrary::getKernelFunction(const std::string& name) {
  if (library_ == nullptr) {
    ET_LOG(Error, "ETMetalShaderLibrary::getKernelFunction: no kernel '%s': the library did not compile",
           name.c_str());
    return nullptr;
  }
  try {
    return std::make_shared<ETMetalKernelFunction>(runtime::get_kernel(library_, name.c_str()));
  } catch (const std::exception& error) {
    ET_LOG(Error, "ETMetalShaderLibrary::getKernelFunction: %s", error.what());
    return nullptr;
  }
}

ETMetalKernelFunction::ETMetalKernelFunction(runtime::Kernel* kernel) : kernel_(kernel) {}

void ETMetalKernelFunction::require_encoding(const char* method) const {
  if (!encoding_) {
    throw std::runtime_error(std::string(runtime::kernel_name(kernel_)) + ": " + method +
                             " without startEncoding (each dispatch ends the encoding)");
  }
}

void ETMetalKernelFunction::startEncoding() {
  runtime::start_encoding(kernel_);
  encoding_ = true;
}

void ETMetalKernelFunction::setArg(unsigned idx, const executorch::runtime::etensor::Tensor& tensor) {
  require_encoding("setArg");
  runtime::set_buffer(kernel_, idx, tensor.mutable_data_ptr());
}

void ETMetalKernelFunction::setArg(unsigned idx, int64_t val) {
  require_encoding("setArg");
  runtime::set_bytes(kernel_, idx, &val, sizeof(val));
}

void ETMetalKernelFunction::setArg(unsigned idx, uint32_t val) {
  require_encoding("setArg");
  runtime::set_bytes(kernel_, idx, &val, sizeof(val));
}

void ETMetalKernelFunction::setArg(unsigned idx, float val) {
  require_encoding("setArg");
  runtime::set_bytes(kernel_, idx, &val, sizeof(val));
}

void ETMetalKernelFunction::setArg(unsigned idx, bool val) {
  require_encoding("setArg");
  // MSL's bool is one byte; C++ does not promise that of its own.
  const uint8_t byte = val ? 1 : 0;
  runtime::set_bytes(kernel_, idx, &byte, 1);
}

void ETMetalKernelFunction::setArg(unsigned idx, const void* data, size_t size) {
  require_encoding("setArg");
  runtime::set_bytes(kernel_, idx, data, size);
}

void ETMetalKernelFunction::setArgUint3(unsigned idx, uint32_t x, uint32_t y, uint32_t z) {
  require_encoding("setArgUint3");
  const uint32_t lanes[4] = {x, y, z, 0};
  runtime::set_bytes(kernel_, idx, lanes, sizeof(lanes));
}

void ETMetalKernelFunction::dispatch_threads(const uint64_t* threads, size_t threads_size, const uint64_t* group) {
  runtime::dispatch(kernel_, threads, threads_size, group, threads_size);
  encoding_ = false;
}

namespace {

// Upstream divides by thread counts to size the groups; Metal rejects an empty dimension anyway.
void require_threads(const runtime::Kernel* kernel, const char* method, const uint64_t* length, size_t length_size) {
  const std::string where = std::string(runtime::kernel_name(kernel)) + ": " + method;
  if (length == nullptr || length_size == 0) throw std::runtime_error(where + " without a length");
  for (size_t d = 0; d < std::min<size_t>(length_size, 3); ++d) {
    if (length[d] == 0) {
      throw std::runtime_error(where + " of no threads in dimension " + std::to_string(d) +
                               " (Metal rejects an empty grid)");
    }
  }
}

// Upstream's threadgroup for a dispatchArray or dispatchArrayWithGroupSize of `dims` dimensions: a
// given size needs one entry per dimension and is clipped to the grid; the two defaults differ for one
// dimension only.
void array_group(uint64_t most, const uint64_t* length, size_t dims, bool with_group_size,
                 const uint64_t* group_size, size_t group_size_size, uint64_t group[3]) {
  if (with_group_size && group_size != nullptr && group_size_size >= dims) {
    if (dims == 1) {
      group[0] = std::min(most, group_size[0]);
    } else {
      for (size_t d = 0; d < dims; ++d) group[d] = std::min(group_size[d], length[d]);
    }
  } else if (dims == 1) {
    group[0] = with_group_size ? most : std::min(most, length[0]);
  } else if (dims == 2) {
    group[0] = std::min<uint64_t>(32, length[0]);
    group[1] = most / group[0];
  } else {
    group[0] = std::min<uint64_t>(8, length[0]);
    group[1] = std::min<uint64_t>(8, length[1]);
    group[2] = most / (group[0] * group[1]);
  }
}

}  // namespace

void ETMetalKernelFunction::dispatchSingle(uint64_t length) {
  require_encoding("dispatchSingle");
  require_threads(kernel_, "dispatchSingle", &length, 1);
  const uint64_t group = std::min(runtime::max_threads_per_threadgroup(kernel_), length);
  dispatch_threads(&length, 1, &group);
}

void ETMetalKernelFunction::dispatchSingleWithGroupSize(uint64_t length, uint64_t group_size) {
  require_encoding("dispatchSingleWithGroupSize");
  require_threads(kernel_, "dispatchSingleWithGroupSize", &length, 1);
  const uint64_t most = runtime::max_threads_per_threadgroup(kernel_);
  const uint64_t group = group_size > 0 ? std::min(group_size, most) : std::min(most, length);
  dispatch_threads(&length, 1, &group);
}

void ETMetalKernelFunction::dispatchArray(const uint64_t* length, size_t length_size) {
  require_encoding("dispatchArray");
  require_threads(kernel_, "dispatchArray", length, length_size);
  const size_t dims = std::min<size_t>(length_size, 3);
  uint64_t group[3];
  array_group(runtime::max_threads_per_threadgroup(kernel_), length, dims, false, nullptr, 0, group);
  dispatch_threads(length, dims, group);
}

void ETMetalKernelFunction::dispatchArrayWithGroupSize(const uint64_t* length, size_t length_size,
                                                       const uint64_t* group_size, size_t group_size_size) {
  require_encoding("dispatchArrayWithGroupSize");
  require_threads(kernel_, "dispatchArrayWithGroupSize", length, length_size);
  const size_t dims = std::min<size_t>(length_size, 3);
  uint64_t group[3];
  array_group(runtime::max_threads_per_threadgroup(kernel_), length, dims, true, group_size, group_size_size, group);
  dispatch_threads(length, dims, group);
}

void ETMetalKernelFunction::dispatchThreadgroups(uint64_t gridX, uint64_t gridY, uint64_t gridZ, uint64_t threadsX,
                                                 uint64_t threadsY, uint64_t threadsZ) {
  require_encoding("dispatchThreadgroups");
  const uint64_t most = runtime::max_threads_per_threadgroup(kernel_);
  if (threadsX * threadsY * threadsZ > most) {
    throw std::runtime_error(std::string(runtime::kernel_name(kernel_)) + ": dispatchThreadgroups of " +
                             std::to_string(threadsX * threadsY * threadsZ) + " threads per threadgroup, more than " +
                             std::to_string(most));
  }
  const uint64_t grid[3] = {gridX, gridY, gridZ};
  const uint64_t group[3] = {threadsX, threadsY, threadsZ};
  runtime::dispatch_threadgroups(kernel_, grid, group);
  encoding_ = false;
}

void ETMetalKernelFunction::runCommandBlock(std::function<void(void)> f) {
  // One block at a time, as upstream's serial queue runs them: every ETMetalKernelFunction of one
  // kernel binds its arguments on the same shimkit kernel. Recursive so that a block that runs another
  // block (which deadlocks on a Mac) runs it rather than hanging the process.
  static std::recursive_mutex queue;
  std::lock_guard<std::recursive_mutex> lock(queue);
  f();
}

ETMetalStream* ETMetalStream::getDefaultStream() {
  static ETMetalStream stream;
  return &stream;
}

void ETMetalStream::synchronize(SyncType syncType) {
  if (shimkit_runtime_synchronize_encoded_work != nullptr) {
    shimkit_runtime_synchronize_encoded_work(static_cast<int>(syncType));
  }
}

void ETMetalStream::synchronize() {
  synchronize(SyncType::COMMIT_AND_WAIT);
}

bool ETMetalStream::isEmpty() const {
  return true;
}

void ETMetalStream::endKernelCoalescing() {}

namespace {

thread_local ETMetalStream* current_stream = nullptr;

}  // namespace

ETMetalStream* getCurrentMetalStream() {
  if (current_stream == nullptr) current_stream = ETMetalStream::getDefaultStream();
  return current_stream;
}

void setCurrentMetalStream(ETMetalStream* stream) {
  current_stream = stream;
}

void synchronize_metal_stream() {
  getCurrentMetalStream()->synchronize(SyncType::COMMIT_AND_WAIT);
}

void synchronize_metal_stream_with_type(int sync_type) {
  getCurrentMetalStream()->synchronize(static_cast<SyncType>(sync_type));
}

// What MetalBackend::execute does once the program has run (metal_backend.cpp:588), for the host that runs it here:
// 0, or 1 with the failure recorded (an adapter's encoded MPSGraph work fails when it runs).
extern "C" int32_t shimkit_runtime_synchronize() {
  try {
    synchronize_metal_stream();
    return 0;
  } catch (const std::exception& error) {
    runtime::set_last_error(std::string("synchronize_metal_stream: ") + error.what());
  } catch (...) {
    runtime::set_last_error("synchronize_metal_stream: an exception that is no std::exception");
  }
  return 1;
}

namespace {

struct DeviceMemory {
  std::mutex mutex;
  std::unordered_set<void*> owned;   // from metal_allocate_buffer: freed by shimkit
  std::unordered_set<void*> mapped;  // from metal_buffer_nocopy: the caller's
};

DeviceMemory& device_memory() {
  static DeviceMemory memory;
  return memory;
}

}  // namespace

extern "C" {

void* metal_allocate_buffer(long bytes) {
  if (bytes <= 0) {
    ET_LOG(Error, "metal_allocate_buffer: invalid size %ld", bytes);
    return nullptr;
  }
  void* ptr = std::malloc(static_cast<size_t>(bytes));
  if (ptr == nullptr) {
    ET_LOG(Error, "metal_allocate_buffer: could not allocate %ld bytes", bytes);
    return nullptr;
  }
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  memory.owned.insert(ptr);
  return ptr;
}

void metal_deallocate_buffer(void* ptr) {
  if (ptr == nullptr) return;
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  if (memory.owned.erase(ptr) != 0) {
    std::free(ptr);
  } else if (memory.mapped.erase(ptr) == 0) {
    ET_LOG(Error, "metal_deallocate_buffer: %p is not a device pointer", ptr);
  }
}

bool metal_is_device_pointer(void* ptr) {
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  return memory.owned.count(ptr) != 0 || memory.mapped.count(ptr) != 0;
}

int metal_copy_memory(void* dst, const void* src, size_t nbytes, bool src_is_device, bool dst_is_device) {
  if (dst == nullptr || src == nullptr || nbytes == 0) {
    ET_LOG(Error, "metal_copy_memory: invalid parameters");
    return -1;
  }
  // Upstream blits device-to-device copies between the buffers it knows, and fails for any other pointer.
  if (src_is_device && dst_is_device &&
      !(metal_is_device_pointer(const_cast<void*>(src)) && metal_is_device_pointer(dst))) {
    ET_LOG(Error, "metal_copy_memory: device-to-device copy between pointers that are not device pointers");
    return -1;
  }
  std::memcpy(dst, src, nbytes);
  return 0;
}

void metal_cleanup_resources() {
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  for (void* ptr : memory.owned) std::free(ptr);
  memory.owned.clear();
  memory.mapped.clear();
}

bool metal_buffer_nocopy(void* ptr, size_t nbytes, bool map_ptr_to_buffer) {
  if (ptr == nullptr || nbytes == 0) {
    ET_LOG(Error, "metal_buffer_nocopy: no memory to wrap (ptr=%p, nbytes=%zu)", ptr, nbytes);
    return false;
  }
  if (map_ptr_to_buffer) {
    DeviceMemory& memory = device_memory();
    std::lock_guard<std::mutex> lock(memory.mutex);
    memory.mapped.insert(ptr);
  }
  return true;
}

}  // extern "C"

}  // namespace metal
}  // namespace backends
}  // namespace executorch
