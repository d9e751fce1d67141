// shimkit's MetalPerformanceShadersGraph subset on Linux: Apple's names and signatures for the graph operations
// shimkit's and upstream's .mm files build, evaluated on the CPU (objc/MPSGraph/).
//
// A graph records its operations when they are built; running or encoding it evaluates the operations its targets
// need, on the CPU, with Apple's documented semantics: elementwise operations broadcast their operands as NumPy
// does, matrix multiplication broadcasts its batch dimensions, and every operation rounds its result to its data
// type, float16 and bfloat16 to nearest-even. Where Apple documents nothing, these are the stand-in's assumptions:
// - matrix products and convolutions accumulate in float32, in index order (each product and running sum rounded
//   to float32), and round once to a 16-bit result type;
// - casts round to nearest-even between floating types, truncate toward zero from floating to integer types (a
//   NaN becomes 0, a value out of range saturates), wrap between integer types, and give 0/1 for booleans;
// - topK ranks as runtime/native/fallbacks/topk.cpp assumes of MPSGraph: a NaN with its sign bit clear above
//   +inf, one with the bit set below -inf, numbers as IEEE values, equal values lower index first;
// - a graph's shapes are fixed when it is built (MPSGraphTensor.shape answers them before any run): a feed is read
//   at its placeholder's shape and a result written at its tensor's shape. A tensor data's own shape is not
//   compared with them (Apple documents no such check), only its type and that its buffer holds that many
//   elements; so a graph reused for operands of another shape computes with the shapes it was built for.
// Bad input raises NSInvalidArgumentException with a reason naming it, where MPSGraph asserts on a Mac: operand
// shapes an operation cannot take, mismatched data types, a placeholder fed that is not this graph's, a
// placeholder needed but not fed, a tensor data of the wrong type or too small a buffer.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

NS_ASSUME_NONNULL_BEGIN

@class MPSGraph, MPSGraphOperation, MPSGraphTensor, MPSGraphTensorData;

typedef NSDictionary<MPSGraphTensor*, MPSGraphTensorData*> MPSGraphTensorDataDictionary;

typedef NS_ENUM(NSUInteger, MPSGraphTensorNamedDataLayout) {
  MPSGraphTensorNamedDataLayoutNCHW = 0,
  MPSGraphTensorNamedDataLayoutNHWC = 1,
  MPSGraphTensorNamedDataLayoutOIHW = 2,
  MPSGraphTensorNamedDataLayoutHWIO = 3,
  MPSGraphTensorNamedDataLayoutCHW = 4,
  MPSGraphTensorNamedDataLayoutHWC = 5,
  MPSGraphTensorNamedDataLayoutHW = 6,
  MPSGraphTensorNamedDataLayoutNCDHW = 7,
  MPSGraphTensorNamedDataLayoutNDHWC = 8,
  MPSGraphTensorNamedDataLayoutOIDHW = 9,
  MPSGraphTensorNamedDataLayoutDHWIO = 10,
};

typedef NS_ENUM(NSUInteger, MPSGraphPaddingStyle) {
  MPSGraphPaddingStyleExplicit = 0,
  MPSGraphPaddingStyleTF_VALID = 1,
  MPSGraphPaddingStyleTF_SAME = 2,
  MPSGraphPaddingStyleExplicitOffset = 3,
  MPSGraphPaddingStyleONNX_SAME_LOWER = 4,
};

@interface MPSGraphObject : NSObject
@end

// A symbolic tensor, owned by its graph (valid as long as the graph is). Copying returns the same tensor, so a
// tensor is a dictionary key by identity.
@interface MPSGraphTensor : MPSGraphObject <NSCopying>
@property(readonly, copy, nullable) MPSShape* shape;
@property(readonly) MPSDataType dataType;
@property(readonly, nonnull) MPSGraphOperation* operation;
@end

@interface MPSGraphOperation : MPSGraphObject <NSCopying>
@property(readonly) NSArray<MPSGraphTensor*>* inputTensors;
@property(readonly) NSArray<MPSGraphTensor*>* outputTensors;
@property(readonly) MPSGraph* graph;
@property(readonly) NSString* name;
@end

// Data for a graph tensor: a dense row-major array of `shape` in an MTLBuffer (from its start, or from an
// MPSNDArray's offset).
@interface MPSGraphTensorData : MPSGraphObject
- (instancetype)initWithMTLBuffer:(id<MTLBuffer>)buffer shape:(MPSShape*)shape dataType:(MPSDataType)dataType;
- (instancetype)initWithMPSNDArray:(MPSNDArray*)ndarray;
@property(readonly, copy) MPSShape* shape;
@property(readonly) MPSDataType dataType;
- (MPSNDArray*)mpsndarray;
@end

typedef void (^MPSGraphExecutionCompletionHandler)(MPSGraphTensorDataDictionary* resultsDictionary,
                                                   NSError* _Nullable error);

@interface MPSGraphExecutionDescriptor : MPSGraphObject
// For -encodeToCommandBuffer:...: called with the results on the committing thread once the graph's work ran.
@property(readwrite, atomic, nullable) MPSGraphExecutionCompletionHandler completionHandler;
// Accepted and without effect: the work is complete when -commit returns (see Metal.h).
@property(readwrite, atomic) BOOL waitUntilCompleted;
@end

@interface MPSGraphConvolution2DOpDescriptor : MPSGraphObject <NSCopying>
@property(readwrite, nonatomic) NSUInteger strideInX;
@property(readwrite, nonatomic) NSUInteger strideInY;
@property(readwrite, nonatomic) NSUInteger dilationRateInX;
@property(readwrite, nonatomic) NSUInteger dilationRateInY;
@property(readwrite, nonatomic) NSUInteger paddingLeft;
@property(readwrite, nonatomic) NSUInteger paddingRight;
@property(readwrite, nonatomic) NSUInteger paddingTop;
@property(readwrite, nonatomic) NSUInteger paddingBottom;
// Explicit, TF_VALID, TF_SAME and ONNX_SAME_LOWER; building a convolution with another raises.
@property(readwrite, nonatomic) MPSGraphPaddingStyle paddingStyle;
// NCHW or NHWC.
@property(readwrite, nonatomic) MPSGraphTensorNamedDataLayout dataLayout;
// OIHW or HWIO.
@property(readwrite, nonatomic) MPSGraphTensorNamedDataLayout weightsLayout;
@property(readwrite, nonatomic) NSUInteger groups;

+ (nullable instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
                                       strideInY:(NSUInteger)strideInY
                                 dilationRateInX:(NSUInteger)dilationRateInX
                                 dilationRateInY:(NSUInteger)dilationRateInY
                                          groups:(NSUInteger)groups
                                     paddingLeft:(NSUInteger)paddingLeft
                                    paddingRight:(NSUInteger)paddingRight
                                      paddingTop:(NSUInteger)paddingTop
                                   paddingBottom:(NSUInteger)paddingBottom
                                    paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                                      dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout
                                   weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout;
+ (nullable instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
                                       strideInY:(NSUInteger)strideInY
                                 dilationRateInX:(NSUInteger)dilationRateInX
                                 dilationRateInY:(NSUInteger)dilationRateInY
                                          groups:(NSUInteger)groups
                                    paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                                      dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout
                                   weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout;
- (void)setExplicitPaddingWithPaddingLeft:(NSUInteger)paddingLeft
                             paddingRight:(NSUInteger)paddingRight
                               paddingTop:(NSUInteger)paddingTop
                            paddingBottom:(NSUInteger)paddingBottom;
@end

@interface MPSGraph : MPSGraphObject
- (instancetype)init;

// Evaluates the targets now; each result is new tensor data in a new shared buffer.
- (MPSGraphTensorDataDictionary*)runWithFeeds:(MPSGraphTensorDataDictionary*)feeds
                                targetTensors:(NSArray<MPSGraphTensor*>*)targetTensors
                             targetOperations:(nullable NSArray<MPSGraphOperation*>*)targetOperations;

// Encodes the evaluation: it runs when the command buffer is committed, reading the feeds and writing each
// result tensor's value into its tensor data's buffer then.
- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(MPSGraphTensorDataDictionary*)feeds
             targetOperations:(nullable NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(MPSGraphTensorDataDictionary*)resultsDictionary
          executionDescriptor:(nullable MPSGraphExecutionDescriptor*)executionDescriptor;
@end

@interface MPSGraph (MPSGraphMemoryOps)
// A static shape only here: a nil (unranked) shape or a -1 dimension raises.
- (MPSGraphTensor*)placeholderWithShape:(nullable MPSShape*)shape
                               dataType:(MPSDataType)dataType
                                   name:(nullable NSString*)name;
// Of shape [1].
- (MPSGraphTensor*)constantWithScalar:(double)scalar dataType:(MPSDataType)dataType;
- (MPSGraphTensor*)constantWithScalar:(double)scalar shape:(MPSShape*)shape dataType:(MPSDataType)dataType;
@end

@interface MPSGraph (MPSGraphArithmeticOps)
- (MPSGraphTensor*)additionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(nullable NSString*)name;
- (MPSGraphTensor*)subtractionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                           name:(nullable NSString*)name;
- (MPSGraphTensor*)multiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                   secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                              name:(nullable NSString*)name;
// Floating types only here (integer division raises: its rounding is not documented).
- (MPSGraphTensor*)divisionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(nullable NSString*)name;
- (MPSGraphTensor*)negativeWithTensor:(MPSGraphTensor*)tensor name:(nullable NSString*)name;
@end

@interface MPSGraph (MPSGraphMatrixMultiplicationOps)
// [..., M, K] x [..., K, N] -> [..., M, N], batch dimensions broadcast.
- (MPSGraphTensor*)matrixMultiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                         secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                                    name:(nullable NSString*)name;
@end

@interface MPSGraph (MPSGraphTensorShapeOps)
// One dimension of `shape` may be -1: what the element count leaves.
- (MPSGraphTensor*)reshapeTensor:(MPSGraphTensor*)tensor withShape:(MPSShape*)shape name:(nullable NSString*)name;
// A dimension index is read signed, as Apple's is: (NSUInteger)-1 is the last dimension.
- (MPSGraphTensor*)transposeTensor:(MPSGraphTensor*)tensor
                         dimension:(NSUInteger)dimensionIndex
                     withDimension:(NSUInteger)dimensionIndex2
                              name:(nullable NSString*)name;
- (MPSGraphTensor*)broadcastTensor:(MPSGraphTensor*)tensor toShape:(MPSShape*)shape name:(nullable NSString*)name;
- (MPSGraphTensor*)castTensor:(MPSGraphTensor*)tensor toType:(MPSDataType)type name:(nullable NSString*)name;
@end

@interface MPSGraph (MPSGraphTopKOps)
// The k largest along the last dimension, and their indices (int32).
- (NSArray<MPSGraphTensor*>*)topKWithSourceTensor:(MPSGraphTensor*)source
                                                k:(NSUInteger)k
                                             name:(nullable NSString*)name;
@end

@interface MPSGraph (MPSGraphConvolutionOps)
// source [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC); weights [O, C / groups, kH, kW] (OIHW) or
// [kH, kW, C / groups, O] (HWIO); the result is laid out as the source.
- (MPSGraphTensor*)convolution2DWithSourceTensor:(MPSGraphTensor*)source
                                   weightsTensor:(MPSGraphTensor*)weights
                                      descriptor:(MPSGraphConvolution2DOpDescriptor*)descriptor
                                            name:(nullable NSString*)name;
@end

NS_ASSUME_NONNULL_END
