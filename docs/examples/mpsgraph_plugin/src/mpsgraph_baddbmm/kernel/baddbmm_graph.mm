// The MPSGraph of one baddbmm call (see baddbmm.h). Manual retain/release, as ExecuTorch's Metal ops are built:
// everything made here is autoreleased into this function's pool, so it is released on every path, an
// NSException's included.
#include "baddbmm.h"

#if __has_feature(objc_arc)
#error "baddbmm_graph.mm manages its objects itself: build without ARC"
#endif

namespace mpsgraph_baddbmm {
namespace {

MPSDataType mps_type(int32_t dtype) {
  switch (dtype) {
    case kFloat16: return MPSDataTypeFloat16;
    case kBFloat16: return MPSDataTypeBFloat16;
    default: return MPSDataTypeFloat32;
  }
}

MPSShape* mps_shape(const std::vector<int64_t>& sizes) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:sizes.size()];
  for (int64_t size : sizes) [shape addObject:@(size)];
  return shape;
}

// A placeholder for `buffer` (fed through `feeds`), widened to float32: products and sums run in float32 and are
// rounded to the dtype once, at the end, as ATen's CPU kernel does for float16 and bfloat16.
// `fed` is the shape of the buffer's data, broadcast to `sizes`.
MPSGraphTensor* input(MPSGraph* graph, NSMutableDictionary* feeds, id<MTLBuffer> buffer,
                      const std::vector<int64_t>& fed, const std::vector<int64_t>& sizes, int32_t dtype,
                      NSString* name) {
  MPSGraphTensor* placeholder = [graph placeholderWithShape:mps_shape(fed) dataType:mps_type(dtype) name:name];
  feeds[placeholder] = [[[MPSGraphTensorData alloc] initWithMTLBuffer:buffer
                                                                shape:mps_shape(fed)
                                                             dataType:mps_type(dtype)] autorelease];
  MPSGraphTensor* tensor = placeholder;
  if (fed != sizes) tensor = [graph broadcastTensor:tensor toShape:mps_shape(sizes) name:nil];
  if (dtype == kFloat32) return tensor;
  return [graph castTensor:tensor toType:MPSDataTypeFloat32 name:nil];
}

}  // namespace

std::string run_baddbmm(const Call& call, const Buffers& buffers, const Execute& execute) {
  if (call.out_numel() == 0) return "";  // nothing to write (and an empty buffer would be nil)
  std::string error;
  @autoreleasepool {
    @try {
      MPSGraph* graph = [[MPSGraph new] autorelease];
      NSMutableDictionary* feeds = [NSMutableDictionary dictionary];
      const std::vector<int64_t> out_sizes = {call.batch, call.rows, call.cols};
      MPSGraphTensor* result = nil;
      if (call.uses_product()) {
        MPSGraphTensor* a = input(graph, feeds, buffers.batch1, call.batch1_shape,
                                  {call.batch, call.rows, call.inner}, call.dtype, @"batch1");
        MPSGraphTensor* b = input(graph, feeds, buffers.batch2, call.batch2_shape,
                                  {call.batch, call.inner, call.cols}, call.dtype, @"batch2");
        result = [graph matrixMultiplicationWithPrimaryTensor:a secondaryTensor:b name:nil];
      } else {
        result = [graph constantWithScalar:0.0 shape:mps_shape(out_sizes) dataType:MPSDataTypeFloat32];
      }
      // ATen multiplies by alpha whatever it is: with alpha == 0, NaN and inf in the batches still show.
      MPSGraphTensor* alpha = [graph constantWithScalar:call.alpha dataType:MPSDataTypeFloat32];
      result = [graph multiplicationWithPrimaryTensor:result secondaryTensor:alpha name:nil];
      if (call.uses_self()) {
        MPSGraphTensor* bias = input(graph, feeds, buffers.self, call.self_shape, out_sizes, call.dtype, @"self");
        if (call.beta != 1.0) {
          MPSGraphTensor* beta = [graph constantWithScalar:call.beta dataType:MPSDataTypeFloat32];
          bias = [graph multiplicationWithPrimaryTensor:bias secondaryTensor:beta name:nil];
        }
        result = [graph additionWithPrimaryTensor:result secondaryTensor:bias name:nil];
      }
      if (call.dtype != kFloat32) result = [graph castTensor:result toType:mps_type(call.dtype) name:@"out"];
      MPSGraphTensorData* out = [[[MPSGraphTensorData alloc] initWithMTLBuffer:buffers.out
                                                                          shape:mps_shape(out_sizes)
                                                                       dataType:mps_type(call.dtype)] autorelease];
      execute(graph, feeds, @{result : out});
    } @catch (NSException* exception) {
      error = std::string("baddbmm: MPSGraph raised ") + [[exception name] UTF8String] + ": " +
              [[exception reason] UTF8String];
    }
  }
  return error;
}

}  // namespace mpsgraph_baddbmm
