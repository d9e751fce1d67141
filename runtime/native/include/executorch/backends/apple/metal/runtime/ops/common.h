// shimkit's declaration of what a c-shim adapter uses from ExecuTorch's Metal op helpers
// (backends/apple/metal/runtime/ops/common.h), written from its public signatures for the Linux stand-in of the
// Metal runtime. Upstream's own ops also take a graph cache and a serial-queue helper from it; the stand-in's ops are
// C++ (runtime/native/fallbacks), so those are left out, and an adapter that uses them fails to compile here naming
// them.
//
// An adapter's Objective-C++ (MPSGraph) is compiled with clang against shimkit.objc and runs on the CPU;
// runtime/native/et_metal_objc.mm implements the functions below.
#pragma once

#ifdef __OBJC__
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
#endif

#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/backends/apple/metal/runtime/shims/types.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/platform/log.h>

namespace executorch {
namespace backends {
namespace metal {

#ifdef __OBJC__
// The buffer registered for `tensor`'s data pointer; throws std::runtime_error naming `tensor_name` (and logs
// `op_name`) where there is none, as ops/common.mm:18-26 does.
id<MTLBuffer> get_mtl_buffer(Tensor* tensor, const char* op_name, const char* tensor_name);
#endif

}  // namespace metal
}  // namespace backends
}  // namespace executorch
