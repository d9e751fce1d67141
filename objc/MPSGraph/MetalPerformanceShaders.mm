// MetalPerformanceShaders on the CPU (objc/include/MetalPerformanceShaders/MetalPerformanceShaders.h):
// MPSCommandBuffer, and MPSNDArray over the stand-in's buffers.
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <cstring>

#import "../Metal/MTLStandIn.h"
#import "MPSStandIn.h"
#include "graph_cpu.h"

namespace mps = shimkit::mpsgraph;

std::vector<int64_t> shimkit_shape_of(MPSShape* shape, const char* what) {
  if (shape == nil) [NSException raise:NSInvalidArgumentException format:@"%s a nil shape", what];
  std::vector<int64_t> sizes;
  for (NSUInteger d = 0; d < [shape count]; ++d) sizes.push_back([[shape objectAtIndex:d] longLongValue]);
  return sizes;
}

MPSShape* shimkit_mps_shape(const std::vector<int64_t>& sizes) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:sizes.size()];
  for (int64_t size : sizes) [shape addObject:@(size)];
  return shape;
}

// -- MPSCommandBuffer ----------------------------------------------------------------------------------------

@interface MPSCommandBuffer () <ShimkitCommandRecording>
@end

@implementation MPSCommandBuffer {
  id<MTLCommandBuffer> _commandBuffer;
  id<MTLCommandBuffer> _rootCommandBuffer;
}

+ (MPSCommandBuffer*)commandBufferWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer {
  return [[[self alloc] initWithCommandBuffer:commandBuffer] autorelease];
}
+ (MPSCommandBuffer*)commandBufferFromCommandQueue:(id<MTLCommandQueue>)commandQueue {
  return [self commandBufferWithCommandBuffer:[commandQueue commandBuffer]];
}
- (instancetype)initWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer {
  if ((self = [super init])) {
    _commandBuffer = [commandBuffer retain];
    _rootCommandBuffer = [commandBuffer retain];
  }
  return self;
}
- (void)dealloc {
  [_commandBuffer release];
  [_rootCommandBuffer release];
  [super dealloc];
}
- (id<MTLCommandBuffer>)commandBuffer {
  return _commandBuffer;
}
- (id<MTLCommandBuffer>)rootCommandBuffer {
  return _rootCommandBuffer;
}

- (void)commitAndContinue {
  id<MTLCommandQueue> queue = [_commandBuffer commandQueue];
  const BOOL retained = [_commandBuffer retainedReferences];
  [_commandBuffer commit];
  [_commandBuffer release];
  _commandBuffer = [(retained ? [queue commandBuffer] : [queue commandBufferWithUnretainedReferences]) retain];
}

- (void)shimkit_encodeCommand:(std::function<void()>)command retaining:(NSArray*)resources {
  [(id<ShimkitCommandRecording>)_commandBuffer shimkit_encodeCommand:std::move(command) retaining:resources];
}

// MTLCommandBuffer, forwarded to the command buffer wrapped now.
- (id<MTLDevice>)device {
  return [_commandBuffer device];
}
- (id<MTLCommandQueue>)commandQueue {
  return [_commandBuffer commandQueue];
}
- (BOOL)retainedReferences {
  return [_commandBuffer retainedReferences];
}
- (NSString*)label {
  return [_commandBuffer label];
}
- (void)setLabel:(NSString*)label {
  [_commandBuffer setLabel:label];
}
- (void)enqueue {
  [_commandBuffer enqueue];
}
- (void)commit {
  [_commandBuffer commit];
}
- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
  [_commandBuffer addCompletedHandler:block];
}
- (void)waitUntilScheduled {
  [_commandBuffer waitUntilScheduled];
}
- (void)waitUntilCompleted {
  [_commandBuffer waitUntilCompleted];
}
- (MTLCommandBufferStatus)status {
  return [_commandBuffer status];
}
- (NSError*)error {
  return [_commandBuffer error];
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
  return [_commandBuffer blitCommandEncoder];
}
- (id<MTLComputeCommandEncoder>)computeCommandEncoder {
  return [_commandBuffer computeCommandEncoder];
}
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value {
  [_commandBuffer encodeSignalEvent:event value:value];
}
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value {
  [_commandBuffer encodeWaitForEvent:event value:value];
}
@end

// -- MPSNDArray ----------------------------------------------------------------------------------------------

@implementation MPSNDArrayDescriptor {
  std::vector<int64_t>* _shape;  // row-major
}
@synthesize dataType = _dataType;

+ (instancetype)descriptorWithDataType:(MPSDataType)dataType shape:(MPSShape*)shape {
  MPSNDArrayDescriptor* descriptor = [[[self alloc] init] autorelease];
  descriptor.dataType = dataType;
  *descriptor->_shape = shimkit_shape_of(shape, "descriptorWithDataType:shape:");
  return descriptor;
}
- (instancetype)init {
  if ((self = [super init])) _shape = new std::vector<int64_t>();
  return self;
}
- (void)dealloc {
  delete _shape;
  [super dealloc];
}
- (NSUInteger)numberOfDimensions {
  return _shape->size();
}
// Dimensions come and go at the slow end, new ones of length 1.
- (void)setNumberOfDimensions:(NSUInteger)count {
  if (count < _shape->size()) {
    _shape->erase(_shape->begin(), _shape->end() - static_cast<std::ptrdiff_t>(count));
  } else {
    _shape->insert(_shape->begin(), count - _shape->size(), 1);
  }
}
- (NSUInteger)lengthOfDimensionAtIndex:(NSUInteger)dimensionIndex {
  return dimensionIndex < _shape->size() ? static_cast<NSUInteger>((*_shape)[_shape->size() - 1 - dimensionIndex]) : 1;
}
- (MPSShape*)getShape {
  return shimkit_mps_shape(*_shape);
}
@end

@implementation MPSNDArray {
  id<MTLBuffer> _buffer;
  NSUInteger _offset;
  MPSNDArrayDescriptor* _descriptor;  // a copy of the one given
}

- (instancetype)initWithDevice:(id<MTLDevice>)device descriptor:(MPSNDArrayDescriptor*)descriptor {
  id<MTLBuffer> buffer = nil;
  @try {
    const std::vector<int64_t> shape = shimkit_shape_of([descriptor getShape], "initWithDevice:descriptor:");
    const NSUInteger bytes = shimkit_raising("initWithDevice:descriptor:", [&] {
      return static_cast<NSUInteger>(mps::element_count(shape)) * mps::element_size(descriptor.dataType);
    });
    buffer = [device newBufferWithLength:bytes options:MTLResourceStorageModeShared];
  } @catch (NSException* exception) {
    [self release];
    @throw;
  }
  @try {
    return [self initWithBuffer:buffer offset:0 descriptor:descriptor];
  } @finally {
    [buffer release];
  }
}

- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset descriptor:(MPSNDArrayDescriptor*)descriptor {
  if (!(self = [super init])) return nil;
  @try {
    shimkit_buffer_storage(buffer, "initWithBuffer:offset:descriptor: the buffer");
    const std::vector<int64_t> shape = shimkit_shape_of([descriptor getShape], "initWithBuffer:offset:descriptor:");
    const NSUInteger bytes = shimkit_raising("initWithBuffer:offset:descriptor:", [&] {
      return static_cast<NSUInteger>(mps::element_count(shape)) * mps::element_size(descriptor.dataType);
    });
    if (offset > [buffer length] || bytes > [buffer length] - offset) {
      [NSException raise:NSInvalidArgumentException
                  format:@"initWithBuffer:offset:descriptor: %s %s at byte offset %lu needs %lu bytes; the buffer has "
                         @"%lu",
                         mps::type_name(descriptor.dataType).c_str(), mps::shape_text(shape).c_str(), offset, bytes,
                         [buffer length]];
    }
  } @catch (NSException* exception) {
    [self release];
    @throw;
  }
  _buffer = [buffer retain];
  _offset = offset;
  _descriptor = [[MPSNDArrayDescriptor descriptorWithDataType:descriptor.dataType shape:[descriptor getShape]] retain];
  return self;
}

- (void)dealloc {
  [_buffer release];
  [_descriptor release];
  [super dealloc];
}

- (id<MTLBuffer>)shimkit_buffer {
  return _buffer;
}
- (NSUInteger)shimkit_offset {
  return _offset;
}
- (MPSDataType)dataType {
  return _descriptor.dataType;
}
- (NSUInteger)numberOfDimensions {
  return _descriptor.numberOfDimensions;
}
- (id<MTLDevice>)device {
  return [_buffer device];
}
- (NSUInteger)lengthOfDimension:(NSUInteger)dimensionIndex {
  return [_descriptor lengthOfDimensionAtIndex:dimensionIndex];
}
- (MPSNDArrayDescriptor*)descriptor {
  return [MPSNDArrayDescriptor descriptorWithDataType:_descriptor.dataType shape:[_descriptor getShape]];
}

// Copies every element between the array and `user` memory laid out by `strides` (see the header).
- (void)transferWith:(void*)user strideBytes:(NSInteger*)strides reading:(bool)reading {
  const std::vector<int64_t> shape = shimkit_shape_of([_descriptor getShape], "readBytes/writeBytes");
  const std::size_t size = mps::element_size(_descriptor.dataType);
  const std::size_t rank = shape.size();
  std::vector<int64_t> user_strides(rank);
  int64_t dense = static_cast<int64_t>(size);
  for (std::size_t d = rank; d-- > 0;) {
    user_strides[d] = strides != nullptr ? strides[rank - 1 - d] : dense;
    dense *= shape[d];
  }
  char* array = static_cast<char*>([shimkit_buffer_storage(_buffer, "the array's buffer") shimkit_bytes]) + _offset;
  const int64_t count = mps::element_count(shape);
  std::vector<int64_t> index(rank, 0);
  int64_t user_offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    char* element = array + i * static_cast<int64_t>(size);
    char* other = static_cast<char*>(user) + user_offset;
    std::memcpy(reading ? other : element, reading ? element : other, size);
    for (std::size_t d = rank; d-- > 0;) {
      user_offset += user_strides[d];
      if (++index[d] < shape[d]) break;
      user_offset -= user_strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

- (void)readBytes:(void*)buffer strideBytes:(NSInteger*)strideBytesPerDimension {
  [self transferWith:buffer strideBytes:strideBytesPerDimension reading:true];
}
- (void)writeBytes:(void*)buffer strideBytes:(NSInteger*)strideBytesPerDimension {
  [self transferWith:buffer strideBytes:strideBytesPerDimension reading:false];
}
@end
