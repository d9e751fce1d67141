// How shimkit.objc's Metal compiles and runs MSL: through a backend that a library loaded into the process
// registers (shimkit.runtime.upstream's glue registers shimkit.metal's, runtime/upstream_glue/shader_backend.cpp).
// libshimkit_objc.so is linked standalone and compiles no MSL itself: shimkit.metal compiles MSL in Python, which
// only a host process that registered a resolver can reach. Without a backend, -newLibraryWithSource:options:error:
// returns nil with an NSError saying so.
//
// Plain C, so that C++ glue registers it without Objective-C. Each function that can fail returns NULL on success
// or the error's text, valid until the backend's next call on the same thread.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ShimkitShaderBackend {
  // Compiles `source` into a library (`*library`).
  const char* (*create_library)(const char* source, void** library);
  void (*delete_library)(void* library);
  // The kernel function `name` of `library` (valid as long as the library) and its maximum threadgroup size.
  const char* (*get_kernel)(void* library, const char* name, void** kernel, uint64_t* max_threads_per_threadgroup);
  // Runs `kernel` once with `arguments[i]` as buffer i (NULL: unbound) over a grid of `grid` threads
  // (dispatchThreads:) or, with `threadgroups` nonzero, of `grid` whole threadgroups (dispatchThreadgroups:).
  const char* (*dispatch)(void* kernel, void* const* arguments, size_t argument_count, const uint64_t grid[3],
                          const uint64_t group[3], int threadgroups);
} ShimkitShaderBackend;

// Registers `backend` (copied) for every Metal device of the process; NULL unregisters. Libraries made before keep
// the backend that made them.
void shimkit_objc_set_shader_backend(const ShimkitShaderBackend* backend);

#ifdef __cplusplus
}
#endif
