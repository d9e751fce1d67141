// Metal compute dispatch on the CPU: the one implementation behind both APIs a Mac's runtime offers
// kernels through, torch's AOTI mps ABI (aoti_torch_mps_*, shim_mps.cpp) and ExecuTorch's
// ETMetalShaderLibrary / ETMetalKernelFunction (et_metal.cpp). A library is MSL compiled by
// shimkit.metal (the host process registers a resolver that compiles a source and names the shared
// library and its kernels); a kernel binds arguments to host memory by buffer index and runs a dispatch
// with shimkit.metal's executor, as Metal's dispatchThreads does.
//
// Every function throws std::runtime_error naming the library source line, kernel or argument at fault;
// the two API layers turn that into their error codes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shimkit {
namespace metal_runtime {

struct Library;
struct Kernel;

Library* create_library(const char* source);
void delete_library(Library* library);
// The kernel stays valid as long as its library; asking twice gives the same kernel.
Kernel* get_kernel(Library* library, const char* name);
const char* kernel_name(const Kernel* kernel);

// Forgets the arguments bound by the previous dispatch.
void start_encoding(Kernel* kernel);
// A buffer argument: the kernel reads and writes `data` itself (a tensor's first element).
void set_buffer(Kernel* kernel, unsigned index, void* data);
// A value argument (setBytes): copied now, padded as Metal pads it.
void set_bytes(Kernel* kernel, unsigned index, const void* data, size_t size);
// dispatchThreads: `threads` has 1 to 3 entries; `group` as many, or nullptr for Metal's default
// (min(threads[0], max threads per threadgroup), 1, 1).
void dispatch(Kernel* kernel, const uint64_t* threads, size_t threads_size, const uint64_t* group,
              size_t group_size);
// dispatchThreadgroups: whole groups, grid counted in groups.
void dispatch_threadgroups(Kernel* kernel, const uint64_t grid[3], const uint64_t group[3]);
uint64_t max_threads_per_threadgroup(const Kernel* kernel);
// The buffer indices the kernel has ([[buffer(n)]], n below this).
size_t buffer_argument_count(const Kernel* kernel);

}  // namespace metal_runtime
}  // namespace shimkit
