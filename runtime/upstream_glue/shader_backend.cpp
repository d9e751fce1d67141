// shimkit.metal as shimkit.objc's MSL compiler (Metal/ShimkitShaderBackend.h): a library built with this unit and
// runtime/native/metal_dispatch.cpp registers, when it is loaded, the dispatch the stand-in runtime runs its kernels
// with, so that Objective-C++ calling Metal (upstream's et_metal.mm) compiles MSL through the resolver the host
// registered (shimkit_runtime_set_resolver) and runs it with shimkit.metal's executor.

#include <Metal/ShimkitShaderBackend.h>

#include <algorithm>
#include <exception>
#include <string>

#include "shimkit/metal_dispatch.h"

namespace runtime = shimkit::metal_runtime;

namespace {

thread_local std::string failure;

// Runs `body`; nullptr, or the text of what it threw (the backend's functions are C: nothing may unwind into
// Metal's Objective-C frames as a C++ exception of this library's own).
template <class Body>
const char* reported(Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const std::exception& error) {
    failure = error.what();
  } catch (...) {
    failure = "unknown exception";
  }
  return failure.c_str();
}

const char* create_library(const char* source, void** library) {
  return reported([&] { *library = runtime::create_library(source); });
}

void delete_library(void* library) { runtime::delete_library(static_cast<runtime::Library*>(library)); }

const char* get_kernel(void* library, const char* name, void** kernel, uint64_t* max_threads) {
  return reported([&] {
    runtime::Kernel* found = runtime::get_kernel(static_cast<runtime::Library*>(library), name);
    *max_threads = runtime::max_threads_per_threadgroup(found);
    *kernel = found;
  });
}

const char* dispatch(void* kernel, void* const* arguments, size_t count, const uint64_t grid[3],
                     const uint64_t group[3], int threadgroups) {
  return reported([&] {
    auto* target = static_cast<runtime::Kernel*>(kernel);
    runtime::start_encoding(target);
    // An encoder's bindings outlive a dispatch (upstream coalesces dispatches on one encoder): a kernel reads the
    // indices it has and ignores those an earlier dispatch set beyond them, as Metal does.
    const size_t used = std::min(count, runtime::buffer_argument_count(target));
    for (size_t index = 0; index < used; ++index) {
      if (arguments[index] != nullptr) runtime::set_buffer(target, static_cast<unsigned>(index), arguments[index]);
    }
    if (threadgroups) {
      runtime::dispatch_threadgroups(target, grid, group);
    } else {
      runtime::dispatch(target, grid, 3, group, 3);
    }
  });
}

__attribute__((constructor)) void register_backend() {
  static const ShimkitShaderBackend backend{create_library, delete_library, get_kernel, dispatch};
  shimkit_objc_set_shader_backend(&backend);
}

}  // namespace
