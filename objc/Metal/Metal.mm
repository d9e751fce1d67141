// Metal on the CPU (objc/include/Metal/Metal.h): one device whose memory is host memory, and command buffers
// that record their commands and run them in order when committed.
#import <Metal/Metal.h>

#include <Block.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#import "MTLStandIn.h"

NSErrorDomain const MTLLibraryErrorDomain = @"MTLLibraryErrorDomain";
NSErrorDomain const MTLCommandBufferErrorDomain = @"MTLCommandBufferErrorDomain";

namespace {

// Metal's limits that its validation layer enforces on argument tables.
constexpr NSUInteger kMaxBufferArguments = 31;
constexpr NSUInteger kMaxInlineBytes = 4096;

[[noreturn]] void raise_invalid(NSString* reason) {
  @throw [NSException exceptionWithName:NSInvalidArgumentException reason:reason userInfo:nil];
}

[[noreturn]] void raise_inconsistent(NSString* reason) {
  @throw [NSException exceptionWithName:NSInternalInconsistencyException reason:reason userInfo:nil];
}

// The shader backend registered last (Metal/ShimkitShaderBackend.h); each library keeps the one that made it.
std::mutex backend_mutex;
std::shared_ptr<const ShimkitShaderBackend> shader_backend;

std::shared_ptr<const ShimkitShaderBackend> current_backend() {
  std::lock_guard<std::mutex> lock(backend_mutex);
  return shader_backend;
}

NSError* library_error(MTLLibraryError code, NSString* message) {
  return [NSError errorWithDomain:MTLLibraryErrorDomain code:code userInfo:@{NSLocalizedDescriptionKey : message}];
}

void check_range(id<MTLBuffer> buffer, NSUInteger offset, NSUInteger length, const char* what) {
  const NSUInteger size = [buffer length];
  if (offset > size || length > size - offset) {
    @throw [NSException exceptionWithName:NSRangeException
                                   reason:[NSString stringWithFormat:@"%s bytes [%lu, %lu) lie outside a buffer of %lu "
                                                                     @"bytes",
                                                                     what, offset, offset + length, size]
                                 userInfo:nil];
  }
}

}  // namespace

// What every Metal object of the stand-in has: a label.
@interface ShimkitMTLObject : NSObject
@property(nullable, copy, atomic) NSString* label;
@end

@implementation ShimkitMTLObject {
  NSString* _label;
}
- (NSString*)label {
  return _label;
}
- (void)setLabel:(NSString*)label {
  NSString* copied = [label copy];
  [_label release];
  _label = copied;
}
- (void)dealloc {
  [_label release];
  [super dealloc];
}
@end

@interface ShimkitMTLDevice : ShimkitMTLObject <MTLDevice>
@end

namespace {

// Created on first use and never freed: Metal's system device lives as long as the process.
ShimkitMTLDevice* system_device() {
  static ShimkitMTLDevice* const device = [[ShimkitMTLDevice alloc] init];
  return device;
}

}  // namespace

// -- Buffers -------------------------------------------------------------------------------------------------

@interface ShimkitMTLBuffer : ShimkitMTLObject <MTLBuffer, ShimkitBufferStorage>
- (instancetype)initWithBytes:(void*)bytes
                       length:(NSUInteger)length
                      options:(MTLResourceOptions)options
                  deallocator:(void (^)(void*, NSUInteger))deallocator;
@end

@implementation ShimkitMTLBuffer {
  void* _bytes;
  NSUInteger _length;
  MTLResourceOptions _options;
  void (^_deallocator)(void*, NSUInteger);  // a copy; frees _bytes
}

- (instancetype)initWithBytes:(void*)bytes
                       length:(NSUInteger)length
                      options:(MTLResourceOptions)options
                  deallocator:(void (^)(void*, NSUInteger))deallocator {
  if ((self = [super init])) {
    _bytes = bytes;
    _length = length;
    _options = options;
    if (deallocator) _deallocator = Block_copy(deallocator);
  }
  return self;
}

- (void)dealloc {
  if (_deallocator) {
    _deallocator(_bytes, _length);
    Block_release(_deallocator);
  }
  [super dealloc];
}

- (id<MTLDevice>)device {
  return system_device();
}
- (NSUInteger)length {
  return _length;
}
- (void*)shimkit_bytes {
  return _bytes;
}
- (void*)contents {
  return self.storageMode == MTLStorageModePrivate ? nullptr : _bytes;
}
- (void)didModifyRange:(NSRange)range {
  check_range(self, range.location, range.length, "didModifyRange:");
}
- (MTLResourceOptions)resourceOptions {
  return _options;
}
- (MTLCPUCacheMode)cpuCacheMode {
  return static_cast<MTLCPUCacheMode>((_options & MTLResourceCPUCacheModeMask) >> MTLResourceCPUCacheModeShift);
}
- (MTLStorageMode)storageMode {
  return static_cast<MTLStorageMode>((_options & MTLResourceStorageModeMask) >> MTLResourceStorageModeShift);
}
- (MTLHazardTrackingMode)hazardTrackingMode {
  return static_cast<MTLHazardTrackingMode>((_options & MTLResourceHazardTrackingModeMask) >>
                                            MTLResourceHazardTrackingModeShift);
}
@end

id<MTLBuffer, ShimkitBufferStorage> shimkit_buffer_storage(id<MTLBuffer> buffer, const char* role) {
  if (![(id)buffer isKindOfClass:[ShimkitMTLBuffer class]]) {
    raise_invalid([NSString stringWithFormat:@"%s is not a buffer of this Metal device", role]);
  }
  return (ShimkitMTLBuffer*)buffer;
}

// -- Events --------------------------------------------------------------------------------------------------

@interface ShimkitMTLSharedEvent : ShimkitMTLObject <MTLSharedEvent>
@end

@implementation ShimkitMTLSharedEvent {
  std::atomic<uint64_t>* _value;  // written by the CPU and by committed command buffers, on any thread
}
- (instancetype)init {
  if ((self = [super init])) _value = new std::atomic<uint64_t>(0);
  return self;
}
- (void)dealloc {
  delete _value;
  [super dealloc];
}
- (id<MTLDevice>)device {
  return system_device();
}
- (uint64_t)signaledValue {
  return _value->load();
}
- (void)setSignaledValue:(uint64_t)value {
  _value->store(value);
}
@end

// -- Command buffers and encoders ----------------------------------------------------------------------------

@interface ShimkitMTLCommandBuffer : ShimkitMTLObject <MTLCommandBuffer, ShimkitCommandRecording>
- (instancetype)initWithQueue:(id<MTLCommandQueue>)queue retainedReferences:(BOOL)retained;
// An encoder opens and ends; while one is open, nothing else may encode.
- (void)shimkit_openEncoder;
- (void)shimkit_endEncoder;
// What the open encoder encodes.
- (void)shimkit_appendCommand:(std::function<void()>)command retaining:(NSArray*)resources;
@end

// What both encoders share: their command buffer (which opened them), and the ended state Metal's validation checks.
@interface ShimkitMTLEncoder : ShimkitMTLObject <MTLCommandEncoder>
- (instancetype)initWithCommandBuffer:(ShimkitMTLCommandBuffer*)commandBuffer;
// Raises once -endEncoding was sent, as Metal's validation does.
- (ShimkitMTLCommandBuffer*)openCommandBuffer:(const char*)method;
@end

@implementation ShimkitMTLEncoder {
  ShimkitMTLCommandBuffer* _commandBuffer;
  BOOL _ended;
}
- (instancetype)initWithCommandBuffer:(ShimkitMTLCommandBuffer*)commandBuffer {
  if ((self = [super init])) _commandBuffer = [commandBuffer retain];
  return self;
}
- (void)dealloc {
  [_commandBuffer release];
  [super dealloc];
}
- (id<MTLDevice>)device {
  return system_device();
}
- (ShimkitMTLCommandBuffer*)openCommandBuffer:(const char*)method {
  if (_ended) raise_inconsistent([NSString stringWithFormat:@"%s on an encoder after endEncoding", method]);
  return _commandBuffer;
}
- (void)endEncoding {
  [[self openCommandBuffer:"endEncoding"] shimkit_endEncoder];
  _ended = YES;
}
@end


// -- Libraries, functions, pipeline states -------------------------------------------------------------------

@interface ShimkitMTLLibrary : ShimkitMTLObject <MTLLibrary>
- (instancetype)initWithBackend:(std::shared_ptr<const ShimkitShaderBackend>)backend library:(void*)library;
- (const ShimkitShaderBackend&)backend;
@end

@interface ShimkitMTLFunction : ShimkitMTLObject <MTLFunction>
- (instancetype)initWithLibrary:(ShimkitMTLLibrary*)library
                           name:(NSString*)name
                         kernel:(void*)kernel
                     maxThreads:(uint64_t)maxThreads;
- (ShimkitMTLLibrary*)library;
- (void*)kernel;
- (uint64_t)maxThreads;
@end

@interface ShimkitMTLComputePipelineState : NSObject <MTLComputePipelineState>
- (instancetype)initWithFunction:(ShimkitMTLFunction*)function;
- (ShimkitMTLFunction*)function;
@end

@implementation ShimkitMTLLibrary {
  std::shared_ptr<const ShimkitShaderBackend>* _backend;
  void* _library;
}
- (instancetype)initWithBackend:(std::shared_ptr<const ShimkitShaderBackend>)backend library:(void*)library {
  if ((self = [super init])) {
    _backend = new std::shared_ptr<const ShimkitShaderBackend>(std::move(backend));
    _library = library;
  }
  return self;
}
- (void)dealloc {
  (*_backend)->delete_library(_library);
  delete _backend;
  [super dealloc];
}
- (const ShimkitShaderBackend&)backend {
  return **_backend;
}
- (id<MTLDevice>)device {
  return system_device();
}
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName {
  void* kernel = nullptr;
  uint64_t maxThreads = 0;
  // Metal answers nil for a name that is no kernel of the library; the backend's reason is not part of its API.
  if ((*_backend)->get_kernel(_library, [functionName UTF8String], &kernel, &maxThreads) != nullptr) return nil;
  return [[ShimkitMTLFunction alloc] initWithLibrary:self name:functionName kernel:kernel maxThreads:maxThreads];
}
@end

@implementation ShimkitMTLFunction {
  ShimkitMTLLibrary* _library;  // retained: the kernel lives as long as its library
  NSString* _name;
  void* _kernel;
  uint64_t _maxThreads;
}
- (instancetype)initWithLibrary:(ShimkitMTLLibrary*)library
                           name:(NSString*)name
                         kernel:(void*)kernel
                     maxThreads:(uint64_t)maxThreads {
  if ((self = [super init])) {
    _library = [library retain];
    _name = [name copy];
    _kernel = kernel;
    _maxThreads = maxThreads;
  }
  return self;
}
- (void)dealloc {
  [_name release];
  [_library release];
  [super dealloc];
}
- (id<MTLDevice>)device {
  return system_device();
}
- (NSString*)name {
  return _name;
}
- (ShimkitMTLLibrary*)library {
  return _library;
}
- (void*)kernel {
  return _kernel;
}
- (uint64_t)maxThreads {
  return _maxThreads;
}
@end

@implementation ShimkitMTLComputePipelineState {
  ShimkitMTLFunction* _function;
}
- (instancetype)initWithFunction:(ShimkitMTLFunction*)function {
  if ((self = [super init])) _function = [function retain];
  return self;
}
- (void)dealloc {
  [_function release];
  [super dealloc];
}
- (ShimkitMTLFunction*)function {
  return _function;
}
- (NSString*)label {
  return nil;
}
- (id<MTLDevice>)device {
  return system_device();
}
- (NSUInteger)maxTotalThreadsPerThreadgroup {
  return static_cast<NSUInteger>([_function maxThreads]);
}
- (NSUInteger)threadExecutionWidth {
  return 32;
}
@end

@implementation MTLArchitecture
- (NSString*)name {
  return @"shimkit-cpu";
}
- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}
@end

@interface ShimkitMTLComputeEncoder : ShimkitMTLEncoder <MTLComputeCommandEncoder>
@end

namespace {

// One argument-table entry: a buffer at an offset, or setBytes' copy.
struct Binding {
  id<MTLBuffer> buffer = nil;  // not retained: the command buffer retains what a dispatch uses, as Metal does
  NSUInteger offset = 0;
  std::shared_ptr<std::vector<unsigned char>> bytes;
};

}  // namespace

// Binds what Metal binds and checks what its validation checks; a dispatch records the pipeline and a snapshot of
// the argument table, and the shader backend runs it at commit.
@implementation ShimkitMTLComputeEncoder {
  ShimkitMTLComputePipelineState* _state;  // retained while set
  std::map<NSUInteger, Binding>* _bindings;
}
- (instancetype)initWithCommandBuffer:(ShimkitMTLCommandBuffer*)commandBuffer {
  if ((self = [super initWithCommandBuffer:commandBuffer])) _bindings = new std::map<NSUInteger, Binding>();
  return self;
}
- (void)dealloc {
  [_state release];
  delete _bindings;
  [super dealloc];
}
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state {
  [self openCommandBuffer:"setComputePipelineState:"];
  if (![(id)state isKindOfClass:[ShimkitMTLComputePipelineState class]]) {
    raise_invalid(@"setComputePipelineState: not a pipeline state of this Metal device");
  }
  [(id)state retain];
  [_state release];
  _state = (ShimkitMTLComputePipelineState*)state;
}
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index {
  [self openCommandBuffer:"setBytes:length:atIndex:"];
  if (index >= kMaxBufferArguments) raise_invalid([NSString stringWithFormat:@"setBytes: index %lu >= 31", index]);
  if (length > kMaxInlineBytes) {
    raise_invalid([NSString stringWithFormat:@"setBytes: %lu bytes; at most 4096 may be set inline", length]);
  }
  // Zero-padded to a multiple of 16 bytes: a kernel may read a value's whole vector type (a uint3 is 16 bytes).
  auto copy = std::make_shared<std::vector<unsigned char>>((length + 15) / 16 * 16 + 16, 0);
  if (length > 0) memcpy(copy->data(), bytes, length);
  (*_bindings)[index] = Binding{nil, 0, std::move(copy)};
}
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index {
  [self openCommandBuffer:"setBuffer:offset:atIndex:"];
  if (index >= kMaxBufferArguments) raise_invalid([NSString stringWithFormat:@"setBuffer: index %lu >= 31", index]);
  if (buffer == nil) {
    _bindings->erase(index);
    return;
  }
  shimkit_buffer_storage(buffer, "setBuffer:offset:atIndex: the buffer");
  check_range(buffer, offset, 0, "setBuffer:offset:atIndex: the offset's");
  (*_bindings)[index] = Binding{buffer, offset, nullptr};
}
- (void)encodeDispatch:(const char*)method grid:(MTLSize)grid group:(MTLSize)group threadgroups:(int)threadgroups {
  ShimkitMTLCommandBuffer* commandBuffer = [self openCommandBuffer:method];
  if (_state == nil) raise_inconsistent([NSString stringWithFormat:@"%s without a compute pipeline state", method]);
  const NSUInteger total = group.width * group.height * group.depth;
  if (total == 0 || total > _state.maxTotalThreadsPerThreadgroup) {
    raise_invalid([NSString stringWithFormat:@"%s: a threadgroup of %lux%lux%lu threads; the pipeline state "
                                             @"allows 1 to %lu",
                                             method, group.width, group.height, group.depth,
                                             _state.maxTotalThreadsPerThreadgroup]);
  }
  // The argument table as it is now, and what keeps it alive until the command has run.
  std::vector<Binding> table(_bindings->empty() ? 0 : _bindings->rbegin()->first + 1);
  NSMutableArray* resources = [NSMutableArray array];
  for (const auto& [index, binding] : *_bindings) {
    table[index] = binding;
    if (binding.buffer != nil) [resources addObject:binding.buffer];
  }
  // The pipeline state (and through it the kernel's library) lives until the command ran, whatever the command
  // buffer retains: a command buffer of unretained references may outlive a pipeline state released after encoding.
  std::shared_ptr<void> state([_state retain], [](void* held) { [(id)held release]; });
  ShimkitMTLFunction* function = [_state function];
  const ShimkitShaderBackend* backend = &[[function library] backend];
  void* kernel = [function kernel];
  const uint64_t gridSize[3] = {grid.width, grid.height, grid.depth};
  const uint64_t groupSize[3] = {group.width, group.height, group.depth};
  [commandBuffer
      shimkit_appendCommand:[=] {
        std::vector<void*> arguments;
        for (const Binding& binding : table) {
          if (binding.bytes) {
            arguments.push_back(binding.bytes->data());
          } else if (binding.buffer != nil) {
            arguments.push_back(static_cast<char*>([shimkit_buffer_storage(binding.buffer, "a dispatch's buffer")
                                                       shimkit_bytes]) + binding.offset);
          } else {
            arguments.push_back(nullptr);
          }
        }
        (void)state;
        const char* failure =
            backend->dispatch(kernel, arguments.data(), arguments.size(), gridSize, groupSize, threadgroups);
        if (failure != nullptr) raise_inconsistent([NSString stringWithUTF8String:failure]);
      }
                  retaining:resources];
}
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup {
  [self encodeDispatch:"dispatchThreadgroups:threadsPerThreadgroup:"
                  grid:threadgroupsPerGrid
                 group:threadsPerThreadgroup
          threadgroups:1];
}
- (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup {
  [self encodeDispatch:"dispatchThreads:threadsPerThreadgroup:"
                  grid:threadsPerGrid
                 group:threadsPerThreadgroup
          threadgroups:0];
}
@end

@interface ShimkitMTLBlitEncoder : ShimkitMTLEncoder <MTLBlitCommandEncoder>
@end

@implementation ShimkitMTLBlitEncoder
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
           sourceOffset:(NSUInteger)sourceOffset
               toBuffer:(id<MTLBuffer>)destinationBuffer
      destinationOffset:(NSUInteger)destinationOffset
                   size:(NSUInteger)size {
  ShimkitMTLCommandBuffer* commandBuffer = [self openCommandBuffer:"copyFromBuffer:"];
  id<ShimkitBufferStorage> source = shimkit_buffer_storage(sourceBuffer, "copyFromBuffer: the source");
  id<ShimkitBufferStorage> destination = shimkit_buffer_storage(destinationBuffer, "copyFromBuffer: the destination");
  check_range(sourceBuffer, sourceOffset, size, "copyFromBuffer: the source's");
  check_range(destinationBuffer, destinationOffset, size, "copyFromBuffer: the destination's");
  [commandBuffer
      shimkit_appendCommand:[=] {
        memmove(static_cast<char*>([destination shimkit_bytes]) + destinationOffset,
                static_cast<const char*>([source shimkit_bytes]) + sourceOffset, size);
      }
                  retaining:@[ sourceBuffer, destinationBuffer ]];
}
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value {
  ShimkitMTLCommandBuffer* commandBuffer = [self openCommandBuffer:"fillBuffer:range:value:"];
  id<ShimkitBufferStorage> target = shimkit_buffer_storage(buffer, "fillBuffer: the buffer");
  check_range(buffer, range.location, range.length, "fillBuffer:range:value:");
  [commandBuffer shimkit_appendCommand:[=] {
    memset(static_cast<char*>([target shimkit_bytes]) + range.location, value, range.length);
  }
                             retaining:@[ buffer ]];
}
@end

@implementation ShimkitMTLCommandBuffer {
  id<MTLCommandQueue> _queue;
  BOOL _retainsReferences;
  BOOL _encoderOpen;
  MTLCommandBufferStatus _status;
  NSError* _error;
  std::vector<std::function<void()>>* _commands;
  NSMutableArray* _resources;  // kept alive until the commands ran, when _retainsReferences
  std::vector<MTLCommandBufferHandler>* _completedHandlers;  // copies, released once called
}

- (instancetype)initWithQueue:(id<MTLCommandQueue>)queue retainedReferences:(BOOL)retained {
  if ((self = [super init])) {
    _queue = [queue retain];
    _retainsReferences = retained;
    _commands = new std::vector<std::function<void()>>();
    _resources = [[NSMutableArray alloc] init];
    _completedHandlers = new std::vector<MTLCommandBufferHandler>();
  }
  return self;
}

- (void)dealloc {
  for (MTLCommandBufferHandler handler : *_completedHandlers) Block_release(handler);
  delete _completedHandlers;
  delete _commands;
  [_resources release];
  [_error release];
  [_queue release];
  [super dealloc];
}

- (id<MTLDevice>)device {
  return system_device();
}
- (id<MTLCommandQueue>)commandQueue {
  return _queue;
}
- (BOOL)retainedReferences {
  return _retainsReferences;
}
- (MTLCommandBufferStatus)status {
  return _status;
}
- (NSError*)error {
  return _error;
}

- (void)checkEncodable:(const char*)method {
  if (_status >= MTLCommandBufferStatusCommitted) {
    raise_inconsistent([NSString stringWithFormat:@"%s on a command buffer already committed", method]);
  }
  if (_encoderOpen) {
    raise_inconsistent([NSString stringWithFormat:@"%s while an encoder is still encoding (send it endEncoding "
                                                  @"first)",
                                                  method]);
  }
}

- (void)shimkit_openEncoder {
  [self checkEncodable:"opening an encoder"];
  _encoderOpen = YES;
}
- (void)shimkit_endEncoder {
  _encoderOpen = NO;
}

- (void)shimkit_appendCommand:(std::function<void()>)command retaining:(NSArray*)resources {
  _commands->push_back(std::move(command));
  if (_retainsReferences) [_resources addObjectsFromArray:resources];
}

- (void)shimkit_encodeCommand:(std::function<void()>)command retaining:(NSArray*)resources {
  [self checkEncodable:"encoding MPS work"];
  [self shimkit_appendCommand:std::move(command) retaining:resources];
}

- (id<MTLComputeCommandEncoder>)computeCommandEncoder {
  [self shimkit_openEncoder];
  return [[[ShimkitMTLComputeEncoder alloc] initWithCommandBuffer:self] autorelease];
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
  [self shimkit_openEncoder];
  return [[[ShimkitMTLBlitEncoder alloc] initWithCommandBuffer:self] autorelease];
}

- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value {
  [self checkEncodable:"encodeSignalEvent:value:"];
  if (![(id)event isKindOfClass:[ShimkitMTLSharedEvent class]]) raise_invalid(@"encodeSignalEvent: a foreign event");
  ShimkitMTLSharedEvent* shared = (ShimkitMTLSharedEvent*)event;
  [self shimkit_appendCommand:[=] { shared.signaledValue = value; } retaining:@[ shared ]];
}

- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value {
  [self checkEncodable:"encodeWaitForEvent:value:"];
  if (![(id)event isKindOfClass:[ShimkitMTLSharedEvent class]]) raise_invalid(@"encodeWaitForEvent: a foreign event");
  ShimkitMTLSharedEvent* shared = (ShimkitMTLSharedEvent*)event;
  [self shimkit_appendCommand:[=] {
    const uint64_t reached = shared.signaledValue;
    if (reached < value) {
      raise_inconsistent([NSString stringWithFormat:@"encodeWaitForEvent: waits for value %llu, but the event is "
                                                    @"at %llu when the wait runs; commands run synchronously at "
                                                    @"commit here, so nothing can signal it later (a Mac would wait)",
                                                    (unsigned long long)value, (unsigned long long)reached]);
    }
  }
                    retaining:@[ shared ]];
}

- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
  if (_status >= MTLCommandBufferStatusCommitted) raise_inconsistent(@"addCompletedHandler: after commit");
  _completedHandlers->push_back(Block_copy(block));
}

- (void)enqueue {
  if (_status == MTLCommandBufferStatusNotEnqueued) _status = MTLCommandBufferStatusEnqueued;
}

- (void)commit {
  if (_status >= MTLCommandBufferStatusCommitted) raise_inconsistent(@"commit on a command buffer already committed");
  if (_encoderOpen) raise_inconsistent(@"commit while an encoder is still encoding (send it endEncoding first)");
  _status = MTLCommandBufferStatusCommitted;
  @try {
    for (const std::function<void()>& command : *_commands) command();
  } @catch (NSException* exception) {
    _status = MTLCommandBufferStatusError;
    _error = [[NSError alloc] initWithDomain:MTLCommandBufferErrorDomain
                                        code:MTLCommandBufferErrorInternal
                                    userInfo:@{NSLocalizedDescriptionKey : [exception reason] ?: [exception name]}];
    [self finish];
    @throw;
  }
  _status = MTLCommandBufferStatusCompleted;
  [self finish];
}

// Drops what the commands held and calls the completed handlers once.
- (void)finish {
  _commands->clear();
  [_resources removeAllObjects];
  std::vector<MTLCommandBufferHandler> handlers;
  handlers.swap(*_completedHandlers);
  for (MTLCommandBufferHandler handler : handlers) {
    handler(self);
    Block_release(handler);
  }
}

- (void)waitUntilScheduled {
  if (_status < MTLCommandBufferStatusCommitted) {
    raise_inconsistent(@"waitUntilScheduled on a command buffer never committed would wait forever");
  }
}
- (void)waitUntilCompleted {
  if (_status < MTLCommandBufferStatusCommitted) {
    raise_inconsistent(@"waitUntilCompleted on a command buffer never committed would wait forever");
  }
}
@end

// -- Queues, compile options, the device -----------------------------------------------------------------------------

@interface ShimkitMTLCommandQueue : ShimkitMTLObject <MTLCommandQueue>
@end

@implementation ShimkitMTLCommandQueue
- (id<MTLDevice>)device {
  return system_device();
}
- (id<MTLCommandBuffer>)commandBuffer {
  return [[[ShimkitMTLCommandBuffer alloc] initWithQueue:self retainedReferences:YES] autorelease];
}
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences {
  return [[[ShimkitMTLCommandBuffer alloc] initWithQueue:self retainedReferences:NO] autorelease];
}
@end

@implementation MTLCompileOptions {
  NSDictionary<NSString*, NSObject*>* _preprocessorMacros;
}
@synthesize fastMathEnabled = _fastMathEnabled;
@synthesize mathMode = _mathMode;
@synthesize mathFloatingPointFunctions = _mathFloatingPointFunctions;
@synthesize languageVersion = _languageVersion;
@synthesize libraryType = _libraryType;
@synthesize preserveInvariance = _preserveInvariance;

// Apple's defaults: fast math, the newest language version.
- (instancetype)init {
  if ((self = [super init])) {
    _fastMathEnabled = YES;
    _mathMode = MTLMathModeFast;
    _mathFloatingPointFunctions = MTLMathFloatingPointFunctionsFast;
    _languageVersion = MTLLanguageVersion3_2;
    _libraryType = MTLLibraryTypeExecutable;
  }
  return self;
}
- (void)dealloc {
  [_preprocessorMacros release];
  [super dealloc];
}
- (NSDictionary<NSString*, NSObject*>*)preprocessorMacros {
  return _preprocessorMacros;
}
- (void)setPreprocessorMacros:(NSDictionary<NSString*, NSObject*>*)macros {
  NSDictionary* copied = [macros copy];
  [_preprocessorMacros release];
  _preprocessorMacros = copied;
}
- (id)copyWithZone:(NSZone*)zone {
  MTLCompileOptions* copy = [[MTLCompileOptions alloc] init];
  copy.preprocessorMacros = _preprocessorMacros;
  copy.fastMathEnabled = _fastMathEnabled;
  copy.mathMode = _mathMode;
  copy.mathFloatingPointFunctions = _mathFloatingPointFunctions;
  copy.languageVersion = _languageVersion;
  copy.libraryType = _libraryType;
  copy.preserveInvariance = _preserveInvariance;
  return copy;
}
@end

@implementation ShimkitMTLDevice

- (NSString*)name {
  return @"shimkit CPU";
}
- (MTLSize)maxThreadsPerThreadgroup {
  return MTLSizeMake(1024, 1024, 1024);
}
- (BOOL)hasUnifiedMemory {
  return YES;
}

- (id<MTLCommandQueue>)newCommandQueue {
  return [[ShimkitMTLCommandQueue alloc] init];
}

// Zero-filled, as Metal's new buffers are; aligned as a page.
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  void* bytes = nullptr;
  if (posix_memalign(&bytes, static_cast<size_t>(getpagesize()), length > 0 ? length : 1) != 0) return nil;
  memset(bytes, 0, length);
  return [[ShimkitMTLBuffer alloc] initWithBytes:bytes
                                          length:length
                                         options:options
                                     deallocator:^(void* pointer, NSUInteger) { free(pointer); }];
}

- (id<MTLBuffer>)newBufferWithBytes:(const void*)pointer length:(NSUInteger)length options:(MTLResourceOptions)options {
  id<MTLBuffer> buffer = [self newBufferWithLength:length options:options];
  if (buffer != nil) memcpy([(ShimkitMTLBuffer*)buffer shimkit_bytes], pointer, length);
  return buffer;
}

- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void*, NSUInteger))deallocator {
  if (pointer == nullptr) return nil;
  return [[ShimkitMTLBuffer alloc] initWithBytes:pointer length:length options:options deallocator:deallocator];
}

- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                               options:(MTLCompileOptions*)options
                                 error:(__autoreleasing NSError**)error {
  std::shared_ptr<const ShimkitShaderBackend> backend = current_backend();
  if (backend == nullptr) {
    if (error != nullptr) {
      *error = library_error(MTLLibraryErrorUnsupported,
                             @"newLibraryWithSource: no MSL compiler is registered in this process (a Metal program "
                             @"on Linux needs shimkit.metal's, registered through shimkit_objc_set_shader_backend)");
    }
    return nil;
  }
  NSMutableString* text = [NSMutableString string];
  for (NSString* name in options.preprocessorMacros) {
    [text appendFormat:@"#define %@ %@\n", name, [options.preprocessorMacros[name] description]];
  }
  [text appendString:source];
  void* library = nullptr;
  if (const char* failure = backend->create_library([text UTF8String], &library)) {
    if (error != nullptr) {
      *error = library_error(MTLLibraryErrorCompileFailure, [NSString stringWithUTF8String:failure]);
    }
    return nil;
  }
  return [[ShimkitMTLLibrary alloc] initWithBackend:std::move(backend) library:library];
}

- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                             error:(__autoreleasing NSError**)error {
  if (![(id)computeFunction isKindOfClass:[ShimkitMTLFunction class]]) {
    if (error != nullptr) {
      *error = library_error(MTLLibraryErrorUnsupported,
                             @"newComputePipelineStateWithFunction: not a function of this Metal device");
    }
    return nil;
  }
  return [[ShimkitMTLComputePipelineState alloc] initWithFunction:(ShimkitMTLFunction*)computeFunction];
}

- (MTLArchitecture*)architecture {
  static MTLArchitecture* const architecture = [[MTLArchitecture alloc] init];
  return architecture;
}

- (id<MTLEvent>)newEvent {
  return [[ShimkitMTLSharedEvent alloc] init];
}
- (id<MTLSharedEvent>)newSharedEvent {
  return [[ShimkitMTLSharedEvent alloc] init];
}
@end

id<MTLDevice> MTLCreateSystemDefaultDevice(void) {
  return [system_device() retain];
}

void shimkit_objc_set_shader_backend(const ShimkitShaderBackend* backend) {
  std::lock_guard<std::mutex> lock(backend_mutex);
  shader_backend = backend == nullptr ? nullptr : std::make_shared<const ShimkitShaderBackend>(*backend);
}
