// What the stand-in's MPSGraph and MPS classes share beyond Apple's API: where an MPSNDArray's bytes lie, and
// MPSShape conversions.
#pragma once

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

@interface MPSNDArray (ShimkitStorage)
- (id<MTLBuffer>)shimkit_buffer;
- (NSUInteger)shimkit_offset;
@end

// The sizes of `shape`; raises NSInvalidArgumentException, naming `what`, for a nil shape.
std::vector<int64_t> shimkit_shape_of(MPSShape* shape, const char* what);
// An autoreleased MPSShape.
MPSShape* shimkit_mps_shape(const std::vector<int64_t>& sizes);

// Runs `body`; a std::invalid_argument it throws (graph_cpu.h's rejections) is raised as NSInvalidArgumentException,
// its reason "<method> <message>", as MPSGraph's assertions name what they reject.
template <class Body>
auto shimkit_raising(const char* method, Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::invalid_argument& error) {
    @throw [NSException exceptionWithName:NSInvalidArgumentException
                                   reason:[NSString stringWithFormat:@"%s %s", method, error.what()]
                                 userInfo:nil];
  }
}
