// shimkit's Metal subset on Linux: Apple's names and signatures for what shimkit's and upstream's .mm files use,
// implemented on the CPU (objc/Metal/Metal.mm). "GPU" memory is host memory, so every storage mode's bytes are
// plain process memory, and the device has unified memory.
//
// Commands run synchronously, on the committing thread, when their command buffer is committed: encoders record,
// -commit executes everything recorded in order, then calls the completed handlers, and the buffer's status is
// MTLCommandBufferStatusCompleted (or ...Error) when -commit returns. What a stand-in therefore cannot show: GPU
// asynchrony (a CPU read of a buffer before -waitUntilCompleted that a Mac would race with the GPU reads the
// finished result here) and GPU timing. A command that would wait forever on a Mac (-waitUntilCompleted on a
// buffer never committed, -encodeWaitForEvent:value: on a value not signalled by the time the wait is reached)
// raises NSInternalInconsistencyException instead; so do the misuses Metal's validation layer reports (a second
// encoder opened before -endEncoding, a commit with an encoder still open, a second commit), and a range outside a
// buffer raises NSRangeException.
//
// MSL is compiled and run by the shader backend a library of the process registers (Metal/ShimkitShaderBackend.h:
// shimkit.metal, through shimkit.runtime.upstream's glue). A compute dispatch runs at -commit like every other
// command, on the committing thread; a kernel that fails there (a buffer argument left unbound, a group larger than
// the pipeline allows) makes -commit raise with the buffer's status MTLCommandBufferStatusError. Without a backend,
// -newLibraryWithSource:options:error: returns nil with an NSError saying so.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/ShimkitShaderBackend.h>

#define MTL_EXTERN FOUNDATION_EXTERN
#define MTL_INLINE NS_INLINE

NS_ASSUME_NONNULL_BEGIN

@protocol MTLDevice, MTLBuffer, MTLCommandQueue, MTLCommandBuffer, MTLLibrary, MTLFunction, MTLComputePipelineState,
    MTLEvent, MTLSharedEvent;

// -- Types ---------------------------------------------------------------------------------------------------

typedef struct {
  NSUInteger width, height, depth;
} MTLSize;

MTL_INLINE MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
  MTLCPUCacheModeDefaultCache = 0,
  MTLCPUCacheModeWriteCombined = 1,
};

typedef NS_ENUM(NSUInteger, MTLStorageMode) {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3,
};

typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
  MTLHazardTrackingModeDefault = 0,
  MTLHazardTrackingModeUntracked = 1,
  MTLHazardTrackingModeTracked = 2,
};

#define MTLResourceCPUCacheModeShift 0
#define MTLResourceCPUCacheModeMask (0xfUL << MTLResourceCPUCacheModeShift)
#define MTLResourceStorageModeShift 4
#define MTLResourceStorageModeMask (0xfUL << MTLResourceStorageModeShift)
#define MTLResourceHazardTrackingModeShift 8
#define MTLResourceHazardTrackingModeMask (0x3UL << MTLResourceHazardTrackingModeShift)

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceCPUCacheModeDefaultCache = MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
  MTLResourceCPUCacheModeWriteCombined = MTLCPUCacheModeWriteCombined << MTLResourceCPUCacheModeShift,
  MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
  MTLResourceStorageModeManaged = MTLStorageModeManaged << MTLResourceStorageModeShift,
  MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
  MTLResourceStorageModeMemoryless = MTLStorageModeMemoryless << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeDefault = MTLHazardTrackingModeDefault << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeUntracked = MTLHazardTrackingModeUntracked << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked << MTLResourceHazardTrackingModeShift,
  MTLResourceOptionCPUCacheModeDefault = MTLResourceCPUCacheModeDefaultCache,
  MTLResourceOptionCPUCacheModeWriteCombined = MTLResourceCPUCacheModeWriteCombined,
};

typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
  MTLLanguageVersion1_0 = (1 << 16),
  MTLLanguageVersion1_1 = (1 << 16) + 1,
  MTLLanguageVersion1_2 = (1 << 16) + 2,
  MTLLanguageVersion2_0 = (2 << 16),
  MTLLanguageVersion2_1 = (2 << 16) + 1,
  MTLLanguageVersion2_2 = (2 << 16) + 2,
  MTLLanguageVersion2_3 = (2 << 16) + 3,
  MTLLanguageVersion2_4 = (2 << 16) + 4,
  MTLLanguageVersion3_0 = (3 << 16),
  MTLLanguageVersion3_1 = (3 << 16) + 1,
  MTLLanguageVersion3_2 = (3 << 16) + 2,
};

typedef NS_ENUM(NSInteger, MTLMathMode) {
  MTLMathModeSafe = 0,
  MTLMathModeRelaxed = 1,
  MTLMathModeFast = 2,
};

typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions) {
  MTLMathFloatingPointFunctionsFast = 0,
  MTLMathFloatingPointFunctionsPrecise = 1,
};

typedef NS_ENUM(NSInteger, MTLLibraryType) {
  MTLLibraryTypeExecutable = 0,
  MTLLibraryTypeDynamic = 1,
};

MTL_EXTERN NSErrorDomain const MTLLibraryErrorDomain;
typedef NS_ENUM(NSUInteger, MTLLibraryError) {
  MTLLibraryErrorUnsupported = 1,
  MTLLibraryErrorInternal = 2,
  MTLLibraryErrorCompileFailure = 3,
  MTLLibraryErrorCompileWarning = 4,
  MTLLibraryErrorFunctionNotFound = 5,
  MTLLibraryErrorFileNotFound = 6,
};

typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

MTL_EXTERN NSErrorDomain const MTLCommandBufferErrorDomain;
typedef NS_ENUM(NSUInteger, MTLCommandBufferError) {
  MTLCommandBufferErrorNone = 0,
  MTLCommandBufferErrorInternal = 1,
  MTLCommandBufferErrorTimeout = 2,
  MTLCommandBufferErrorPageFault = 3,
  MTLCommandBufferErrorAccessRevoked = 4,
  MTLCommandBufferErrorNotPermitted = 7,
  MTLCommandBufferErrorOutOfMemory = 8,
  MTLCommandBufferErrorInvalidResource = 9,
  MTLCommandBufferErrorMemoryless = 10,
  MTLCommandBufferErrorDeviceRemoved = 11,
  MTLCommandBufferErrorStackOverflow = 12,
};

typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

// -- Resources -----------------------------------------------------------------------------------------------

@protocol MTLResource <NSObject>
@property(nullable, copy, atomic) NSString* label;
@property(readonly) id<MTLDevice> device;
@property(readonly) MTLCPUCacheMode cpuCacheMode;
@property(readonly) MTLStorageMode storageMode;
@property(readonly) MTLHazardTrackingMode hazardTrackingMode;
@property(readonly) MTLResourceOptions resourceOptions;
@end

@protocol MTLBuffer <MTLResource>
@property(readonly) NSUInteger length;
// The buffer's bytes; NULL for MTLStorageModePrivate, which the CPU may not touch (blits and graphs may).
- (void*)contents NS_RETURNS_INNER_POINTER;
// Raises NSRangeException for a range outside the buffer; the bytes are already visible (unified memory).
- (void)didModifyRange:(NSRange)range;
@end

// -- Shaders (compiled by the registered backend: see the top of this file) ----------------------------------

@interface MTLCompileOptions : NSObject <NSCopying>
@property(nullable, readwrite, copy, nonatomic) NSDictionary<NSString*, NSObject*>* preprocessorMacros;
@property(readwrite, nonatomic) BOOL fastMathEnabled;
@property(readwrite, nonatomic) MTLMathMode mathMode;
@property(readwrite, nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions;
@property(readwrite, nonatomic) MTLLanguageVersion languageVersion;
@property(readwrite, nonatomic) MTLLibraryType libraryType;
@property(readwrite, nonatomic) BOOL preserveInvariance;
@end

@protocol MTLFunction <NSObject>
@property(nullable, copy, atomic) NSString* label;
@property(readonly) id<MTLDevice> device;
@property(readonly) NSString* name;
@end

@protocol MTLLibrary <NSObject>
@property(nullable, copy, atomic) NSString* label;
@property(readonly) id<MTLDevice> device;
// +1, as on Apple; nil for a name that is no kernel of the library.
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end

// maxTotalThreadsPerThreadgroup is what shimkit.metal reports for the kernel (its
// [[max_total_threads_per_threadgroup]], else 1024); threadExecutionWidth its simdgroup width, 32.
@protocol MTLComputePipelineState <NSObject>
@property(nullable, readonly) NSString* label;
@property(readonly) id<MTLDevice> device;
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger threadExecutionWidth;
@end

// -- Events --------------------------------------------------------------------------------------------------

@protocol MTLEvent <NSObject>
@property(nullable, readonly) id<MTLDevice> device;
@property(nullable, copy, atomic) NSString* label;
@end

@protocol MTLSharedEvent <MTLEvent>
@property(readwrite) uint64_t signaledValue;
@end

// -- Command encoding ----------------------------------------------------------------------------------------

@protocol MTLCommandEncoder <NSObject>
@property(readonly) id<MTLDevice> device;
@property(nullable, copy, atomic) NSString* label;
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
// Copies the bytes now, as Metal does (at most 4 KiB).
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
// Raise NSInternalInconsistencyException without a pipeline state, NSInvalidArgumentException for a threadgroup
// larger than its maxTotalThreadsPerThreadgroup or of size 0, as Metal's validation does; the kernel runs at commit.
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
           sourceOffset:(NSUInteger)sourceOffset
               toBuffer:(id<MTLBuffer>)destinationBuffer
      destinationOffset:(NSUInteger)destinationOffset
                   size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

@protocol MTLCommandBuffer <NSObject>
@property(readonly) id<MTLDevice> device;
@property(readonly) id<MTLCommandQueue> commandQueue;
// NO for -commandBufferWithUnretainedReferences: the caller keeps every resource alive until completion.
@property(readonly) BOOL retainedReferences;
@property(nullable, copy, atomic) NSString* label;
- (void)enqueue;
// Runs every command encoded, then the completed handlers (see the top of this file).
- (void)commit;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)waitUntilScheduled;
- (void)waitUntilCompleted;
@property(readonly) MTLCommandBufferStatus status;
@property(nullable, readonly) NSError* error;
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
@end

@protocol MTLCommandQueue <NSObject>
@property(nullable, copy, atomic) NSString* label;
@property(readonly) id<MTLDevice> device;
- (nullable id<MTLCommandBuffer>)commandBuffer;
- (nullable id<MTLCommandBuffer>)commandBufferWithUnretainedReferences;
@end

// -- The device ----------------------------------------------------------------------------------------------

// The GPU's family name (macOS 13): "shimkit-cpu" here. Upstream's runtime picks its commitAndContinue interval by
// the name's last letter (p, g, s, d); any other letter gets its default, the interval of 'g'.
@interface MTLArchitecture : NSObject <NSCopying>
@property(readonly) NSString* name;
@end

@protocol MTLDevice <NSObject>
@property(readonly) NSString* name;
@property(readonly) MTLArchitecture* architecture;
@property(readonly) MTLSize maxThreadsPerThreadgroup;
@property(readonly) BOOL hasUnifiedMemory;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (nullable id<MTLBuffer>)newBufferWithBytes:(const void*)pointer
                                      length:(NSUInteger)length
                                     options:(MTLResourceOptions)options;
// Any non-null `pointer`. Apple documents that it be page-aligned, but ExecuTorch's Metal runtime, which runs on Macs,
// makes such buffers at each constant's offset in the weights blob (shim_mps.mm:436) and at each packed view's first
// byte (memory.cpp:582): Metal evidently accepts them. The deallocator, if any, is called with (pointer, length) when
// the buffer is freed.
- (nullable id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                            length:(NSUInteger)length
                                           options:(MTLResourceOptions)options
                                       deallocator:(void (^_Nullable)(void* pointer, NSUInteger length))deallocator;
// +1; nil with an MTLLibraryErrorDomain error (MTLLibraryErrorCompileFailure and the compiler's message, or
// MTLLibraryErrorUnsupported without a shader backend). The options' preprocessorMacros are #defined before the
// source; the math modes are not applied (shimkit.metal computes fast:: math as precise::).
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(__autoreleasing NSError**)error;
- (nullable id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                                      error:(__autoreleasing NSError**)error;
- (nullable id<MTLEvent>)newEvent;
- (nullable id<MTLSharedEvent>)newSharedEvent;
@end

// The one CPU device, owned by the caller (+1), as on Apple.
MTL_EXTERN id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;

NS_ASSUME_NONNULL_END
