// shimkit's declaration of the part of ExecuTorch's Metal runtime API (backends/apple/metal/runtime/shims/
// et_metal.h) that c-shim adapters and the runtime's own ops use, written from its public signatures for
// the Linux stand-in of the Metal runtime: runtime/native/et_metal.cpp runs it on the CPU through
// shimkit/metal_dispatch.h. Names, namespaces and signatures are upstream's, so an adapter that compiles
// here compiles against a real ExecuTorch tree (tests/test_metal_runtime_adapters.py checks both); only
// the private members differ.
//
// Where upstream logs a failure from a void method and carries on (the dispatch silently not happening),
// this stand-in throws std::runtime_error naming the kernel: the adapters call these methods inside
// runCommandBlock, and the C ABI layer that calls the adapters turns the exception into an error code.
//
// Compiled as Objective-C++ (an adapter's .mm, against shimkit.objc's Metal and MPSGraph), it declares upstream's
// Objective-C part too: the device, the data-pointer-to-buffer map, the stream's command buffer and
// executeMPSGraph. runtime/native/et_metal_objc.mm implements them; the C++ stand-in never sees them.
#pragma once

#ifdef __OBJC__
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
@class MPSGraph;
@class MPSCommandBuffer;
#include <unordered_map>
#endif

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace executorch::runtime::etensor {
class Tensor;
}

namespace shimkit {
namespace metal_runtime {
struct Library;
struct Kernel;
}  // namespace metal_runtime
}  // namespace shimkit

namespace executorch {
namespace backends {
namespace metal {

class ETMetalKernelFunction;

// How far a synchronization goes. On the CPU every dispatch has finished when it returns, so all of
// them mean the same; the values exist for source compatibility with upstream's ops.
enum class SyncType {
  NONE,
  COMMIT,
  COMMIT_AND_WAIT,
  COMMIT_AND_CONTINUE,
  COMMIT_ADAPTIVE,
};

// An MSL library, compiled when constructed. A source that does not compile is logged and leaves the
// library empty, as upstream: every getKernelFunction then returns nullptr.
class ETMetalShaderLibrary {
 public:
  ETMetalShaderLibrary(const std::string& source);
  ~ETMetalShaderLibrary();
  ETMetalShaderLibrary(const ETMetalShaderLibrary&) = delete;
  ETMetalShaderLibrary& operator=(const ETMetalShaderLibrary&) = delete;

  // nullptr (and a logged error) when the library has no kernel of that name.
  std::shared_ptr<ETMetalKernelFunction> getKernelFunction(const std::string& name);

 private:
  shimkit::metal_runtime::Library* library_;
};

// One kernel of a library: startEncoding, then its arguments by buffer index, then one dispatch.
// A dispatch ends the encoding, as upstream's (which drops its encoder): the next dispatch starts
// with startEncoding again.
class ETMetalKernelFunction {
 public:
  explicit ETMetalKernelFunction(shimkit::metal_runtime::Kernel* kernel);

  void startEncoding();
  // The tensor's storage as a device buffer: the kernel reads and writes it in place.
  void setArg(unsigned idx, const executorch::runtime::etensor::Tensor& tensor);
  void setArg(unsigned idx, int64_t val);
  void setArg(unsigned idx, uint32_t val);
  void setArg(unsigned idx, float val);
  void setArg(unsigned idx, bool val);
  void setArg(unsigned idx, const void* data, size_t size);
  // A uint3: 16 bytes in Metal's layout (the fourth lane padding).
  void setArgUint3(unsigned idx, uint32_t x, uint32_t y, uint32_t z);

  void dispatchSingle(uint64_t length);
  void dispatchSingleWithGroupSize(uint64_t length, uint64_t group_size);
  void dispatchArray(const uint64_t* length, size_t length_size);
  void dispatchArrayWithGroupSize(const uint64_t* length, size_t length_size, const uint64_t* group_size,
                                  size_t group_size_size);
  // Whole threadgroups: the grid counts groups, not threads.
  void dispatchThreadgroups(uint64_t gridX, uint64_t gridY, uint64_t gridZ, uint64_t threadsX, uint64_t threadsY,
                            uint64_t threadsZ);

  // Runs `f` now: upstream runs it synchronously on the stream's queue, which the CPU needs no queue for.
  void runCommandBlock(std::function<void(void)> f);

 private:
  void require_encoding(const char* method) const;
  void dispatch_threads(const uint64_t* threads, size_t threads_size, const uint64_t* group);

  shimkit::metal_runtime::Kernel* kernel_;
  bool encoding_ = false;
};

// The command stream. Dispatches run to completion when they are made, so there is never pending work:
// synchronizing returns at once.
class ETMetalStream {
 public:
  static ETMetalStream* getDefaultStream();

  // Both overloads, as upstream declares them: a call without an argument is ambiguous there too.
  void synchronize(SyncType syncType = SyncType::COMMIT_AND_WAIT);
  void synchronize();
  bool isEmpty() const;
  void endKernelCoalescing();

#ifdef __OBJC__
  id<MTLDevice> device() const;
  id<MTLCommandQueue> commandQueue() const;
  // The command buffer MPSGraph work is encoded on, made when first asked for; synchronize commits it.
  MPSCommandBuffer* commandBuffer();
  // Encodes the graph on commandBuffer() and no more: upstream ignores `syncType` (et_metal.mm:1175-1188), so the
  // work runs at the next synchronize (or before the next work the stand-in runs at once).
  void executeMPSGraph(MPSGraph* mpsGraph, NSDictionary* feeds, NSDictionary* results,
                       SyncType syncType = SyncType::COMMIT_ADAPTIVE);
#endif
};

ETMetalStream* getCurrentMetalStream();
void setCurrentMetalStream(ETMetalStream* stream);

void synchronize_metal_stream();
void synchronize_metal_stream_with_type(int sync_type);

// Device memory is host memory here. A device pointer is one metal_allocate_buffer returned (and that
// metal_deallocate_buffer has not freed yet), or one metal_buffer_nocopy mapped.
extern "C" {

void* metal_allocate_buffer(long bytes);
void metal_deallocate_buffer(void* ptr);
bool metal_is_device_pointer(void* ptr);
// 0 on success, -1 for null pointers, a zero size, or a device-to-device copy between pointers that are
// not device pointers.
int metal_copy_memory(void* dst, const void* src, size_t nbytes, bool src_is_device, bool dst_is_device);
// Frees every buffer metal_allocate_buffer made and forgets the mapped ones.
void metal_cleanup_resources();
// Makes the caller's memory a device pointer (if map_ptr_to_buffer) without copying or owning it:
// metal_deallocate_buffer forgets it and leaves it to the caller.
bool metal_buffer_nocopy(void* ptr, size_t nbytes, bool map_ptr_to_buffer);

#ifdef __OBJC__
id<MTLDevice> get_metal_device();
id<MTLCommandQueue> get_metal_command_queue();
#endif

}  // extern "C"

#ifdef __OBJC__
// Every data pointer a live tensor of this runtime has (views included, at their offset), with a buffer over
// the bytes from it to the end of what the tensor spans: what upstream registers at each allocation, no-copy view and
// constant (et_metal.mm:209-243, memory.cpp:578-586, shim_mps.mm:436).
extern std::unordered_map<void*, id<MTLBuffer>> ptr_to_mtl_buffer;
#endif

}  // namespace metal
}  // namespace backends
}  // namespace executorch
