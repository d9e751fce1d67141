// The Objective-C part of ExecuTorch's Metal runtime API (et_metal.h's __OBJC__ declarations, ops/common.h), for
// plugin adapters written in Objective-C++ (an MPSGraph kernel), compiled with clang against shimkit.objc's Metal and
// MPSGraph on the CPU. A runtime carries this unit only where such an adapter is in it.
//
// As upstream's et_metal.mm (pytorch/executorch cff6f4d):
// - every tensor data pointer has a buffer in ptr_to_mtl_buffer (:209-243 allocations, memory.cpp:578-586 no-copy
//   views, shim_mps.mm:436 constants); here a no-copy buffer over the tensor's host memory, registered by
//   tensors.cpp through shimkit/objc_hooks.h and forgotten when the last tensor with that pointer is deleted;
// - executeMPSGraph encodes on the stream's command buffer and ignores its sync type (:1175-1188): the graph runs
//   when the stream synchronizes, and synchronize commits with the sync type's meaning (:964-994). An adapter that
//   reads a graph's result without synchronizing reads what was there before, as it would on a Mac. The C++
//   stand-in runs its own work at once, so it first runs what is encoded (run_encoded_work), keeping the order.
#include <executorch/backends/apple/metal/runtime/ops/common.h>

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "shimkit/objc_hooks.h"

namespace executorch {
namespace backends {
namespace metal {

std::unordered_map<void*, id<MTLBuffer>> ptr_to_mtl_buffer;

namespace {

struct Registration {
  size_t bytes = 0;
  int tensors = 0;
};

// One lock for the pointer map and the stream: adapters run on the caller's thread, as upstream's shims do.
std::recursive_mutex& state_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

std::unordered_map<void*, Registration>& registrations() {
  static auto* map = new std::unordered_map<void*, Registration>();
  return *map;
}

MPSCommandBuffer* encoded = nil;  // the stream's command buffer, made when first asked for

void commit_encoded(bool wait, bool keep_going) {
  if (encoded == nil) return;
  if (keep_going) {
    [encoded commitAndContinue];
    return;
  }
  [encoded commit];
  if (wait) [encoded waitUntilCompleted];
  [encoded release];
  encoded = nil;
}

}  // namespace

extern "C" {

id<MTLDevice> get_metal_device() {
  static id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  return device;
}

id<MTLCommandQueue> get_metal_command_queue() {
  static id<MTLCommandQueue> queue = [get_metal_device() newCommandQueue];
  return queue;
}

}  // extern "C"

id<MTLDevice> ETMetalStream::device() const {
  return get_metal_device();
}

id<MTLCommandQueue> ETMetalStream::commandQueue() const {
  return get_metal_command_queue();
}

MPSCommandBuffer* ETMetalStream::commandBuffer() {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (encoded == nil) encoded = [[MPSCommandBuffer commandBufferFromCommandQueue:get_metal_command_queue()] retain];
  return encoded;
}

void ETMetalStream::executeMPSGraph(MPSGraph* mpsGraph, NSDictionary* feeds, NSDictionary* results, SyncType) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  @autoreleasepool {
    [mpsGraph encodeToCommandBuffer:commandBuffer()
                              feeds:feeds
                   targetOperations:nil
                  resultsDictionary:results
                executionDescriptor:nil];
  }
}

id<MTLBuffer> get_mtl_buffer(Tensor* tensor, const char* op_name, const char* tensor_name) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  auto found = ptr_to_mtl_buffer.find(tensor->mutable_data_ptr());
  if (found == ptr_to_mtl_buffer.end()) {
    ET_LOG(Error, "%s: %s tensor not found in Metal buffer mapping", op_name, tensor_name);
    throw std::runtime_error(std::string(tensor_name) + " tensor not found in Metal buffer mapping");
  }
  return found->second;
}

}  // namespace metal
}  // namespace backends
}  // namespace executorch

namespace metal = executorch::backends::metal;

extern "C" {

void shimkit_runtime_data_pointer_made(void* data, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(metal::state_mutex());
  metal::Registration& registration = metal::registrations()[data];
  ++registration.tensors;
  if (bytes <= registration.bytes) return;
  // The first tensor at this pointer, or a larger view at it: its buffer must reach as far as the tensor does.
  id<MTLBuffer> buffer = [metal::get_metal_device() newBufferWithBytesNoCopy:data
                                                                       length:bytes
                                                                      options:MTLResourceStorageModeShared
                                                                  deallocator:nil];
  if (buffer == nil) {
    --registration.tensors;
    throw std::runtime_error("no Metal buffer over " + std::to_string(bytes) + " bytes of a tensor");
  }
  auto previous = metal::ptr_to_mtl_buffer.find(data);
  if (previous != metal::ptr_to_mtl_buffer.end()) [previous->second release];
  metal::ptr_to_mtl_buffer[data] = buffer;
  registration.bytes = bytes;
}

void shimkit_runtime_data_pointer_released(void* data) {
  std::lock_guard<std::recursive_mutex> lock(metal::state_mutex());
  auto found = metal::registrations().find(data);
  if (found == metal::registrations().end() || --found->second.tensors > 0) return;
  metal::registrations().erase(found);
  auto buffer = metal::ptr_to_mtl_buffer.find(data);
  if (buffer != metal::ptr_to_mtl_buffer.end()) {
    [buffer->second release];
    metal::ptr_to_mtl_buffer.erase(buffer);
  }
}

void shimkit_runtime_synchronize_encoded_work(int sync_type) {
  std::lock_guard<std::recursive_mutex> lock(metal::state_mutex());
  switch (static_cast<metal::SyncType>(sync_type)) {
    case metal::SyncType::NONE:
      return;
    case metal::SyncType::COMMIT_AND_CONTINUE:
      metal::commit_encoded(false, true);
      return;
    case metal::SyncType::COMMIT_AND_WAIT:
      metal::commit_encoded(true, false);
      return;
    case metal::SyncType::COMMIT:
    case metal::SyncType::COMMIT_ADAPTIVE:
      metal::commit_encoded(false, false);
      return;
  }
}

}  // extern "C"
