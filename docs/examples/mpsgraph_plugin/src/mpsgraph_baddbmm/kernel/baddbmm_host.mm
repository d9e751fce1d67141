// The host module's Metal side: the kernel run the way a test can call it, on host memory. Each operand is copied
// into a buffer of its own (a Mac's -newBufferWithBytesNoCopy: takes page-aligned memory only, which a torch tensor's
// data need not be), the graph is encoded on a command buffer of a queue of this device, committed and waited for,
// and out's buffer copied back. On Linux the device is shimkit.objc's, which runs the graph on the CPU.
#include <cstring>

#include "baddbmm.h"

namespace mpsgraph_baddbmm {

std::string baddbmm_on_host(const Call& call, const void* self, const void* batch1, const void* batch2, void* out) {
  if (call.out_numel() == 0) return "";
  const std::size_t size = element_size(call.dtype);
  std::string error;
  @autoreleasepool {
    id<MTLDevice> device = [MTLCreateSystemDefaultDevice() autorelease];
    if (device == nil) return "baddbmm: no Metal device";
    id<MTLCommandQueue> queue = [[device newCommandQueue] autorelease];
    auto copy = [&](const void* data, int64_t count) -> id<MTLBuffer> {
      return [[device newBufferWithBytes:data length:count * size options:MTLResourceStorageModeShared] autorelease];
    };
    Buffers buffers;
    if (call.uses_product()) {
      buffers.batch1 = copy(batch1, numel(call.batch1_shape));
      buffers.batch2 = copy(batch2, numel(call.batch2_shape));
    }
    if (call.uses_self()) buffers.self = copy(self, numel(call.self_shape));
    buffers.out = [[device newBufferWithLength:call.out_numel() * size options:MTLResourceStorageModeShared]
        autorelease];
    error = run_baddbmm(call, buffers, [&](MPSGraph* graph, NSDictionary* feeds, NSDictionary* results) {
      MPSCommandBuffer* commands = [MPSCommandBuffer commandBufferFromCommandQueue:queue];
      [graph encodeToCommandBuffer:commands
                             feeds:feeds
                  targetOperations:nil
                 resultsDictionary:results
               executionDescriptor:nil];
      [commands commit];
      [commands waitUntilCompleted];
    });
    if (error.empty()) std::memcpy(out, [buffers.out contents], call.out_numel() * size);
  }
  return error;
}

}  // namespace mpsgraph_baddbmm
