// shimkit's CPU Metal compiling and running MSL (objc/include/Metal/ShimkitShaderBackend.h): a library from source,
// its functions and pipeline states, compute encoders dispatching threads and threadgroups at commit, and what
// Metal's validation reports. Built as a shared library with runtime/upstream_glue/shader_backend.cpp and
// runtime/native/metal_dispatch.cpp (which register shimkit.metal as the shader backend when it is loaded); the
// test loads it into Python, registers the MSL compiler and calls shimkit_test_metal_shaders, which writes one line
// per scenario, "ok <name>" or "FAIL <name>: <why>".
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "scenario_checks.h"

namespace {

using scenario_checks::check;
using scenario_checks::check_raises;
using scenario_checks::Failure;

std::string report;

void scenario(const char* name, const std::function<void()>& body) {
  std::string why;
  @autoreleasepool {
    @try {
      body();
    } @catch (NSException* exception) {
      why = std::string("unexpected ") + [[exception name] UTF8String] + ": " + [[exception reason] UTF8String];
    }
  }
  report += (why.empty() ? std::string("ok ") + name : std::string("FAIL ") + name + ": " + why) + "\n";
}

void run(const char* name, const std::function<void()>& body) {
  try {
    scenario(name, body);
  } catch (const Failure& failure) {
    report += std::string("FAIL ") + name + ": " + failure.why + "\n";
  }
}

NSString* const kSource = @R"(
#include <metal_stdlib>
using namespace metal;

kernel void scale(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                  constant float& factor [[buffer(2)]], constant uint& count [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
  if (i < count) out[i] = in[i] * factor + OFFSET;
}

// Sums each group's elements through threadgroup memory and a barrier: one result per group.
kernel void group_sums(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                       uint lane [[thread_position_in_threadgroup]], uint group [[threadgroup_position_in_grid]],
                       uint width [[threads_per_threadgroup]]) {
  threadgroup float partial[64];
  partial[lane] = in[group * width + lane];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) {
    float sum = 0;
    for (uint k = 0; k < width; ++k) sum += partial[k];
    out[group] = sum;
  }
}

[[max_total_threads_per_threadgroup(64)]]
kernel void grid_index(device uint* out [[buffer(0)]], uint2 position [[thread_position_in_grid]],
                       uint2 grid [[threads_per_grid]]) {
  out[position.y * grid.x + position.x] = position.y * 1000 + position.x;
}
)";

// The library of kSource, with OFFSET defined through the compile options.
id<MTLLibrary> library(id<MTLDevice> device) {
  MTLCompileOptions* options = [[MTLCompileOptions new] autorelease];
  options.preprocessorMacros = @{@"OFFSET" : @"0.5f"};
  NSError* error = nil;
  id<MTLLibrary> made = [device newLibraryWithSource:kSource options:options error:&error];
  check(made != nil && error == nil, std::string("the library compiles: ") +
                                         (error ? [[error localizedDescription] UTF8String] : "no error given"));
  return [made autorelease];
}

id<MTLComputePipelineState> pipeline(id<MTLDevice> device, id<MTLLibrary> library, NSString* name) {
  id<MTLFunction> function = [[library newFunctionWithName:name] autorelease];
  check(function != nil && [function.name isEqualToString:name], "the function exists and keeps its name");
  NSError* error = nil;
  id<MTLComputePipelineState> state = [device newComputePipelineStateWithFunction:function error:&error];
  check(state != nil && error == nil, "a pipeline state");
  return [state autorelease];
}

void scenarios() {
  id<MTLDevice> device = [MTLCreateSystemDefaultDevice() autorelease];
  id<MTLCommandQueue> queue = [[device newCommandQueue] autorelease];

  run("architecture", [&] {
    check([device.architecture.name isEqualToString:@"shimkit-cpu"], "the architecture's name");
  });

  run("dispatch_threads_at_commit", [&] {
    id<MTLComputePipelineState> state = pipeline(device, library(device), @"scale");
    check(state.maxTotalThreadsPerThreadgroup == 1024 && state.threadExecutionWidth == 32, "the default limits");
    const unsigned count = 37;  // not a multiple of the group: a partial last group
    id<MTLBuffer> input = [[device newBufferWithLength:(count + 3) * sizeof(float) options:MTLResourceStorageModeShared]
        autorelease];
    id<MTLBuffer> output = [[device newBufferWithLength:count * sizeof(float) options:MTLResourceStorageModePrivate]
        autorelease];
    float* in = static_cast<float*>([input contents]);
    for (unsigned i = 0; i < count + 3; ++i) in[i] = static_cast<float>(i) - 10.0f;
    id<MTLCommandBuffer> commands = [queue commandBuffer];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:state];
    [encoder setBuffer:input offset:3 * sizeof(float) atIndex:0];  // the kernel sees in[3...]
    [encoder setBuffer:output offset:0 atIndex:1];
    float factor = 3.0f;
    [encoder setBytes:&factor length:sizeof factor atIndex:2];
    [encoder setBytes:&count length:sizeof count atIndex:3];
    factor = 100.0f;  // setBytes copied the value: this does not reach the kernel
    [encoder dispatchThreads:MTLSizeMake(count, 1, 1) threadsPerThreadgroup:MTLSizeMake(8, 1, 1)];
    [encoder endEncoding];
    // Read back through a shared buffer: a private one has no CPU contents.
    id<MTLBuffer> readable = [[device newBufferWithLength:count * sizeof(float) options:MTLResourceStorageModeShared]
        autorelease];
    id<MTLBlitCommandEncoder> blit = [commands blitCommandEncoder];
    [blit copyFromBuffer:output sourceOffset:0 toBuffer:readable destinationOffset:0 size:count * sizeof(float)];
    [blit endEncoding];
    const float* out = static_cast<const float*>([readable contents]);
    check(out[0] == 0.0f, "nothing runs before commit");
    [commands commit];
    [commands waitUntilCompleted];
    check(commands.status == MTLCommandBufferStatusCompleted, "completed");
    for (unsigned i = 0; i < count; ++i) {
      const float want = (static_cast<float>(i + 3) - 10.0f) * 3.0f + 0.5f;
      check(out[i] == want, "out[" + std::to_string(i) + "] = " + std::to_string(out[i]) + ", not " +
                                std::to_string(want));
    }
  });

  run("dispatch_threadgroups_with_barriers", [&] {
    id<MTLComputePipelineState> state = pipeline(device, library(device), @"group_sums");
    const unsigned groups = 5, width = 48;
    std::vector<float> values(groups * width);
    for (unsigned i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) - 2.0f;
    id<MTLBuffer> input = [[device newBufferWithBytes:values.data()
                                               length:values.size() * sizeof(float)
                                              options:MTLResourceStorageModeShared] autorelease];
    id<MTLBuffer> output = [[device newBufferWithLength:groups * sizeof(float) options:MTLResourceStorageModeShared]
        autorelease];
    id<MTLCommandBuffer> commands = [queue commandBufferWithUnretainedReferences];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:state];
    [encoder setBuffer:input offset:0 atIndex:0];
    [encoder setBuffer:output offset:0 atIndex:1];
    [encoder dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(width, 1, 1)];
    [encoder endEncoding];
    [commands commit];
    const float* out = static_cast<const float*>([output contents]);
    for (unsigned g = 0; g < groups; ++g) {
      float want = 0;
      for (unsigned k = 0; k < width; ++k) want += values[g * width + k];
      check(out[g] == want, "group " + std::to_string(g) + " sums to " + std::to_string(out[g]));
    }
  });

  run("two_dimensional_grid_and_kernel_limit", [&] {
    id<MTLComputePipelineState> state = pipeline(device, library(device), @"grid_index");
    check(state.maxTotalThreadsPerThreadgroup == 64, "[[max_total_threads_per_threadgroup(64)]] is the limit");
    id<MTLBuffer> output = [[device newBufferWithLength:6 * 5 * sizeof(unsigned) options:MTLResourceStorageModeShared]
        autorelease];
    id<MTLCommandBuffer> commands = [queue commandBuffer];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:state];
    [encoder setBuffer:output offset:0 atIndex:0];
    check_raises(NSInvalidArgumentException, "allows 1 to 64", [&] {
      [encoder dispatchThreads:MTLSizeMake(6, 5, 1) threadsPerThreadgroup:MTLSizeMake(16, 8, 1)];
    });
    [encoder dispatchThreads:MTLSizeMake(6, 5, 1) threadsPerThreadgroup:MTLSizeMake(4, 4, 1)];
    [encoder endEncoding];
    [commands commit];
    const unsigned* out = static_cast<const unsigned*>([output contents]);
    for (unsigned y = 0; y < 5; ++y) {
      for (unsigned x = 0; x < 6; ++x) check(out[y * 6 + x] == y * 1000 + x, "the 2-D position");
    }
  });

  run("compile_errors_and_unknown_functions", [&] {
    NSError* error = nil;
    id<MTLLibrary> broken = [device newLibraryWithSource:@"kernel void f(device float* x [[buffer(0)]]) { x[0] = y; }"
                                                 options:nil
                                                   error:&error];
    check(broken == nil && error != nil, "a source that does not compile gives no library, and an error");
    check(error.code == MTLLibraryErrorCompileFailure && [error.domain isEqualToString:MTLLibraryErrorDomain],
          "MTLLibraryErrorCompileFailure");
    check([[error localizedDescription] containsString:@"y"], "the message names what is wrong");
    check([library(device) newFunctionWithName:@"no_such_kernel"] == nil, "no function for an unknown name");
  });

  run("dispatch_rules", [&] {
    id<MTLComputePipelineState> state = pipeline(device, library(device), @"scale");
    id<MTLBuffer> buffer = [[device newBufferWithLength:64 options:MTLResourceStorageModeShared] autorelease];
    id<MTLCommandBuffer> commands = [queue commandBuffer];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:state];
    check_raises(NSInvalidArgumentException, "allows 1 to 1024", [&] {
      [encoder dispatchThreads:MTLSizeMake(4, 1, 1) threadsPerThreadgroup:MTLSizeMake(0, 1, 1)];
    });
    [encoder setBuffer:buffer offset:0 atIndex:0];
    [encoder setBuffer:buffer offset:0 atIndex:1];
    [encoder setBuffer:buffer offset:0 atIndex:2];
    [encoder setBuffer:nil offset:0 atIndex:2];  // unbinds it
    // Arguments 2 and 3 unbound: Metal's validation rejects the dispatch; here it fails when it runs.
    [encoder dispatchThreads:MTLSizeMake(4, 1, 1) threadsPerThreadgroup:MTLSizeMake(4, 1, 1)];
    [encoder endEncoding];
    check_raises(NSInternalInconsistencyException, "argument 2 was not set", [&] { [commands commit]; });
    check(commands.status == MTLCommandBufferStatusError && commands.error != nil, "the buffer's status is Error");
  });
}

}  // namespace

// Runs every scenario; writes the report (truncated to `size`) and returns its whole length.
extern "C" size_t shimkit_test_metal_shaders(char* text, size_t size) {
  report.clear();
  scenarios();
  if (size > 0) {
    const size_t copied = std::min(report.size(), size - 1);
    std::memcpy(text, report.data(), copied);
    text[copied] = '\0';
  }
  return report.size();
}
