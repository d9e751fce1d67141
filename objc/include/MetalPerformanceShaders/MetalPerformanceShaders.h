// shimkit's MetalPerformanceShaders subset on Linux: the data types, MPSCommandBuffer and MPSNDArray that
// MPSGraph code uses, with Apple's names, signatures and enum values; implemented on the CPU
// (objc/MPSGraph/MetalPerformanceShaders.mm). Commands run when committed, as objc/include/Metal/Metal.h says.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#define MPS_EXPORT FOUNDATION_EXTERN

NS_ASSUME_NONNULL_BEGIN

typedef NS_ENUM(uint32_t, MPSDataType) {
  MPSDataTypeInvalid = 0,

  MPSDataTypeFloatBit = 0x10000000,
  MPSDataTypeFloat32 = MPSDataTypeFloatBit | 32,
  MPSDataTypeFloat16 = MPSDataTypeFloatBit | 16,

  MPSDataTypeComplexBit = 0x01000000,
  MPSDataTypeComplexFloat32 = MPSDataTypeFloatBit | MPSDataTypeComplexBit | 64,
  MPSDataTypeComplexFloat16 = MPSDataTypeFloatBit | MPSDataTypeComplexBit | 32,

  MPSDataTypeSignedBit = 0x20000000,
  MPSDataTypeIntBit = MPSDataTypeSignedBit,
  MPSDataTypeInt2 = MPSDataTypeSignedBit | 2,
  MPSDataTypeInt4 = MPSDataTypeSignedBit | 4,
  MPSDataTypeInt8 = MPSDataTypeSignedBit | 8,
  MPSDataTypeInt16 = MPSDataTypeSignedBit | 16,
  MPSDataTypeInt32 = MPSDataTypeSignedBit | 32,
  MPSDataTypeInt64 = MPSDataTypeSignedBit | 64,

  MPSDataTypeUInt2 = 2,
  MPSDataTypeUInt4 = 4,
  MPSDataTypeUInt8 = 8,
  MPSDataTypeUInt16 = 16,
  MPSDataTypeUInt32 = 32,
  MPSDataTypeUInt64 = 64,

  MPSDataTypeAlternateEncodingBit = 0x80000000,
  MPSDataTypeBool = MPSDataTypeAlternateEncodingBit | 8,
  MPSDataTypeBFloat16 = MPSDataTypeAlternateEncodingBit | MPSDataTypeFloat16,

  MPSDataTypeNormalizedBit = 0x40000000,
  MPSDataTypeUnorm1 = MPSDataTypeNormalizedBit | 1,
  MPSDataTypeUnorm8 = MPSDataTypeNormalizedBit | 8,
};

// Sizes, slowest-moving dimension first (row-major order).
typedef NSArray<NSNumber*> MPSShape;

// A command buffer that MPS kernels and MPSGraph encode into. It forwards every MTLCommandBuffer message to the
// command buffer it currently wraps; -commitAndContinue commits that one and wraps a new one from the same queue.
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
+ (MPSCommandBuffer*)commandBufferWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer;
+ (MPSCommandBuffer*)commandBufferFromCommandQueue:(id<MTLCommandQueue>)commandQueue;
- (instancetype)initWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer;
@property(readonly, retain) id<MTLCommandBuffer> commandBuffer;
@property(readonly, retain) id<MTLCommandBuffer> rootCommandBuffer;
- (void)commitAndContinue;
@end

@interface MPSNDArrayDescriptor : NSObject
@property(readwrite, nonatomic) MPSDataType dataType;
@property(readwrite, nonatomic) NSUInteger numberOfDimensions;
// Dimension 0 is the fastest-moving one: the last entry of the shape.
- (NSUInteger)lengthOfDimensionAtIndex:(NSUInteger)dimensionIndex;
- (MPSShape*)getShape;
+ (instancetype)descriptorWithDataType:(MPSDataType)dataType shape:(MPSShape*)shape;
@end

// A dense row-major array of its descriptor's shape in an MTLBuffer, from a byte offset.
@interface MPSNDArray : NSObject
- (instancetype)initWithDevice:(id<MTLDevice>)device descriptor:(MPSNDArrayDescriptor*)descriptor;
// Raises NSInvalidArgumentException when the array would reach past the buffer's end.
- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer
                        offset:(NSUInteger)offset
                    descriptor:(MPSNDArrayDescriptor*)descriptor;
@property(readonly, nonatomic) MPSDataType dataType;
@property(readonly, nonatomic) NSUInteger numberOfDimensions;
@property(readonly, retain, nonatomic) id<MTLDevice> device;
// Dimension 0 is the fastest-moving one.
- (NSUInteger)lengthOfDimension:(NSUInteger)dimensionIndex;
- (MPSNDArrayDescriptor*)descriptor;
// Copies the array to (read) or from (write) `buffer`, whose element at index i lies at
// sum(i_d * strideBytesPerDimension[d]) bytes, d counted as the array counts dimensions (0 fastest); NULL strides
// mean dense row-major.
- (void)readBytes:(void*)buffer strideBytes:(nullable NSInteger*)strideBytesPerDimension;
- (void)writeBytes:(void*)buffer strideBytes:(nullable NSInteger*)strideBytesPerDimension;
@end

NS_ASSUME_NONNULL_END
