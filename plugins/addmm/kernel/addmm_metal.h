// addmm on Metal: an MPSGraph built from the portable plan and cached under the plan's key.
//
// On Linux it compiles and runs against shimkit.objc's CPU Metal and MPSGraph (tests/test_objc_addmm.py); setup.py
// compiles the .mm files on macOS only; ExecuTorch's Metal runtime build compiles them through the
// addmm plugin's kernel sources (build.metal_runtime_sources("addmm")).
#pragma once

#ifdef __OBJC__
#import <Metal/Metal.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include "addmm_plan.h"

namespace shimkit {
namespace metal {

// What the surrounding runtime provides: its device, its buffers and its command stream.
class Host {
 public:
  virtual ~Host() = default;
  virtual id<MTLDevice> device() = 0;
  // The buffer whose memory holds `data`, and the byte offset of `data` in it; nil if none does.
  virtual id<MTLBuffer> buffer_for(const void* data, NSUInteger* byte_offset) = 0;
  // Waits for queued GPU work, so the CPU may read or write shared buffers (packing operands).
  virtual void synchronize() = 0;
  // Encodes and commits `graph`; with `wait`, returns only once the GPU has finished it.
  virtual void run_graph(MPSGraph* graph, NSDictionary* feeds, NSDictionary* results, bool wait) = 0;
};

}  // namespace metal

namespace addmm {

Status run_metal(const Plan& plan, const Operands& operands, metal::Host& host);

}  // namespace addmm
}  // namespace shimkit
#endif  // __OBJC__
