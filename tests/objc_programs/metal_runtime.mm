// shimkit's CPU Metal and MPSGraph (objc/), scenario by scenario: the behaviour their headers state that a
// comparison with torch cannot show (command buffers, encoders, events, buffers and their storage modes, MPSNDArray
// strides and offsets, the errors MPSGraph raises). One line per scenario, "ok <name>" or "FAIL <name>: <why>";
// exit status 1 if any fails.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "scenario_checks.h"

namespace {

using scenario_checks::check;
using scenario_checks::check_raises;
using scenario_checks::Failure;

int failures = 0;

void scenario(const char* name, const std::function<void()>& body) {
  std::string why;
  @autoreleasepool {
    @try {
      body();
    } @catch (NSException* exception) {
      why = std::string("unexpected ") + [[exception name] UTF8String] + ": " + [[exception reason] UTF8String];
    }
  }
  // A Failure is a C++ exception: caught outside the pool, it passes through the @try untouched.
  if (why.empty()) {
    std::printf("ok %s\n", name);
  } else {
    ++failures;
    std::printf("FAIL %s: %s\n", name, why.c_str());
  }
}

void run(const char* name, const std::function<void()>& body) {
  try {
    scenario(name, body);
  } catch (const Failure& failure) {
    ++failures;
    std::printf("FAIL %s: %s\n", name, failure.why.c_str());
  }
}

id<MTLBuffer> floats_buffer(id<MTLDevice> device, const std::vector<float>& values) {
  return [[device newBufferWithBytes:values.data()
                              length:values.size() * sizeof(float)
                             options:MTLResourceStorageModeShared] autorelease];
}

std::vector<float> floats_of(id<MTLBuffer> buffer, NSUInteger offset, std::size_t count) {
  const float* data = reinterpret_cast<const float*>(static_cast<const char*>([buffer contents]) + offset);
  return std::vector<float>(data, data + count);
}

MPSGraphTensorData* tensor_data(id<MTLBuffer> buffer, MPSShape* shape, MPSDataType type = MPSDataTypeFloat32) {
  return [[[MPSGraphTensorData alloc] initWithMTLBuffer:buffer shape:shape dataType:type] autorelease];
}

}  // namespace

int main() {
  @autoreleasepool {
    id<MTLDevice> device = [MTLCreateSystemDefaultDevice() autorelease];
    id<MTLCommandQueue> queue = [[device newCommandQueue] autorelease];

    run("device", [&] {
      id<MTLDevice> again = [MTLCreateSystemDefaultDevice() autorelease];
      check(again == device, "MTLCreateSystemDefaultDevice gives one device");
      check([[device name] length] > 0, "the device has a name");
      check(device.hasUnifiedMemory, "unified memory");
      check(device.maxThreadsPerThreadgroup.width == 1024, "1024 threads per threadgroup");
      check(queue.device == device, "the queue's device");
    });

    run("buffers", [&] {
      id<MTLBuffer> zeros = [[device newBufferWithLength:64 options:MTLResourceStorageModeShared] autorelease];
      check(zeros.length == 64, "length");
      const std::vector<unsigned char> none(64, 0);
      check(memcmp([zeros contents], none.data(), 64) == 0, "a new buffer is zero-filled");
      check(zeros.storageMode == MTLStorageModeShared, "shared storage");
      id<MTLBuffer> managed = [[device newBufferWithLength:8 options:MTLResourceStorageModeManaged] autorelease];
      check(managed.storageMode == MTLStorageModeManaged, "managed storage");
      [managed didModifyRange:NSMakeRange(0, 8)];
      check_raises(NSRangeException, "outside", [&] { [managed didModifyRange:NSMakeRange(4, 8)]; });
      id<MTLBuffer> hidden = [[device newBufferWithLength:8 options:MTLResourceStorageModePrivate] autorelease];
      check(hidden.storageMode == MTLStorageModePrivate && [hidden contents] == nullptr, "private memory has no contents");
      const float values[] = {1.5f, -2.0f};
      id<MTLBuffer> copied = [[device newBufferWithBytes:values length:sizeof values options:MTLResourceStorageModeShared] autorelease];
      check(floats_of(copied, 0, 2) == std::vector<float>({1.5f, -2.0f}), "newBufferWithBytes copies");
      check([copied contents] != values, "into memory of its own");
    });

    run("buffer_without_copy", [&] {
      const std::size_t page = static_cast<std::size_t>(getpagesize());
      void* memory = nullptr;
      check(posix_memalign(&memory, page, page) == 0, "page-aligned memory");
      __block void* freed = nullptr;
      __block NSUInteger freed_length = 0;
      id<MTLBuffer> wrapped = [device newBufferWithBytesNoCopy:memory
                                                        length:page
                                                       options:MTLResourceStorageModeShared
                                                   deallocator:^(void* pointer, NSUInteger length) {
                                                     freed = pointer;
                                                     freed_length = length;
                                                     free(pointer);
                                                   }];
      check([wrapped contents] == memory, "the buffer is the memory given");
      check(freed == nullptr, "not freed while the buffer lives");
      // Not page-aligned: accepted, as ExecuTorch's runtime needs (objc/include/Metal/Metal.h).
      char* inside = static_cast<char*>(memory) + 4;
      id<MTLBuffer> offset = [device newBufferWithBytesNoCopy:inside length:4 options:MTLResourceStorageModeShared
                                                  deallocator:nil];
      check(offset != nil && [offset contents] == inside && [offset length] == 4, "memory not page-aligned is wrapped");
      [offset release];
      [wrapped release];
      check(freed == memory && freed_length == page, "the deallocator gets the memory and its length");
    });

    run("blits_run_at_commit", [&] {
      id<MTLBuffer> source = floats_buffer(device, {1, 2, 3, 4});
      id<MTLBuffer> hidden = [[device newBufferWithLength:16 options:MTLResourceStorageModePrivate] autorelease];
      id<MTLBuffer> target = floats_buffer(device, {0, 0, 0, 0});
      id<MTLCommandBuffer> commands = [queue commandBuffer];
      id<MTLBlitCommandEncoder> blit = [commands blitCommandEncoder];
      [blit copyFromBuffer:source sourceOffset:4 toBuffer:hidden destinationOffset:0 size:12];
      [blit copyFromBuffer:hidden sourceOffset:0 toBuffer:target destinationOffset:4 size:12];
      [blit fillBuffer:target range:NSMakeRange(0, 4) value:0xff];
      check_raises(NSRangeException, "outside", [&] {
        [blit copyFromBuffer:source sourceOffset:8 toBuffer:target destinationOffset:0 size:12];
      });
      [blit endEncoding];
      check(floats_of(target, 0, 4) == std::vector<float>({0, 0, 0, 0}), "nothing runs before commit");
      check(commands.status == MTLCommandBufferStatusNotEnqueued, "not enqueued before commit");
      [commands commit];
      [commands waitUntilCompleted];
      const std::vector<float> done = floats_of(target, 0, 4);
      uint32_t first;
      memcpy(&first, &done[0], 4);
      check(first == 0xffffffffu && done[1] == 2 && done[2] == 3 && done[3] == 4, "the blits ran in order");
      check(commands.status == MTLCommandBufferStatusCompleted && commands.error == nil, "completed");
    });

    run("command_buffer_rules", [&] {
      id<MTLCommandBuffer> commands = [queue commandBuffer];
      check(commands.retainedReferences && ![queue commandBufferWithUnretainedReferences].retainedReferences,
            "retained references");
      check(commands.commandQueue == queue && commands.device == device, "its queue and device");
      check_raises(NSInternalInconsistencyException, "wait forever", [&] { [commands waitUntilCompleted]; });
      id<MTLBlitCommandEncoder> blit = [commands blitCommandEncoder];
      check_raises(NSInternalInconsistencyException, "still encoding", [&] { [commands computeCommandEncoder]; });
      check_raises(NSInternalInconsistencyException, "still encoding", [&] { [commands commit]; });
      [blit endEncoding];
      check_raises(NSInternalInconsistencyException, "after endEncoding", [&] { [blit endEncoding]; });
      __block int calls = 0;
      __block id<MTLCommandBuffer> seen = nil;
      [commands addCompletedHandler:^(id<MTLCommandBuffer> finished) {
        ++calls;
        seen = finished;
      }];
      [commands enqueue];
      check(commands.status == MTLCommandBufferStatusEnqueued, "enqueued");
      [commands commit];
      check(calls == 1 && seen == commands, "the completed handler ran once, with the buffer");
      check_raises(NSInternalInconsistencyException, "already committed", [&] { [commands commit]; });
      check_raises(NSInternalInconsistencyException, "already committed", [&] { [commands blitCommandEncoder]; });
    });

    run("compute_encoder_without_msl", [&] {
      NSError* error = nil;
      id<MTLLibrary> library = [device newLibraryWithSource:@"kernel void f() {}" options:nil error:&error];
      check(library == nil, "no library");
      check(error != nil && [[error localizedDescription] containsString:@"no MSL compiler is registered"],
            "the error says no MSL compiler is registered");
      check([[error domain] isEqualToString:MTLLibraryErrorDomain], "a library error");
      id<MTLCommandBuffer> commands = [queue commandBuffer];
      id<MTLComputeCommandEncoder> compute = [commands computeCommandEncoder];
      const int value = 7;
      [compute setBytes:&value length:sizeof value atIndex:0];
      std::vector<char> big(4097);
      check_raises(NSInvalidArgumentException, "4096", [&] { [compute setBytes:big.data() length:big.size() atIndex:1]; });
      check_raises(NSInvalidArgumentException, "index 31", [&] { [compute setBuffer:nil offset:0 atIndex:31]; });
      check_raises(NSInternalInconsistencyException, "without a compute pipeline state", [&] {
        [compute dispatchThreads:MTLSizeMake(4, 1, 1) threadsPerThreadgroup:MTLSizeMake(4, 1, 1)];
      });
      [compute endEncoding];
    });

    run("compile_options", [&] {
      MTLCompileOptions* options = [[MTLCompileOptions new] autorelease];
      check(options.fastMathEnabled && options.mathMode == MTLMathModeFast, "Apple's defaults");
      options.mathMode = MTLMathModeSafe;
      options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
      options.languageVersion = MTLLanguageVersion3_1;
      options.preprocessorMacros = @{@"N" : @4};
      MTLCompileOptions* copy = [[options copy] autorelease];
      check(copy.mathMode == MTLMathModeSafe && copy.mathFloatingPointFunctions == MTLMathFloatingPointFunctionsPrecise &&
                copy.languageVersion == MTLLanguageVersion3_1 && [(NSNumber*)copy.preprocessorMacros[@"N"] intValue] == 4,
            "a copy keeps every option");
    });

    run("shared_events", [&] {
      id<MTLSharedEvent> event = [[device newSharedEvent] autorelease];
      check(event.signaledValue == 0, "starts at 0");
      id<MTLCommandBuffer> first = [queue commandBuffer];
      [first encodeSignalEvent:event value:3];
      [first encodeWaitForEvent:event value:3];
      check(event.signaledValue == 0, "signalled only when the commands run");
      [first commit];
      check(event.signaledValue == 3 && first.status == MTLCommandBufferStatusCompleted, "signalled at commit");
      id<MTLCommandBuffer> second = [queue commandBuffer];
      [second encodeWaitForEvent:event value:5];
      check_raises(NSInternalInconsistencyException, "waits for value 5", [&] { [second commit]; });
      check(second.status == MTLCommandBufferStatusError && second.error != nil, "the buffer ends in error");
      event.signaledValue = 9;
      check(event.signaledValue == 9, "the CPU signals");
    });

    run("mps_command_buffer", [&] {
      MPSCommandBuffer* commands = [MPSCommandBuffer commandBufferFromCommandQueue:queue];
      id<MTLCommandBuffer> root = commands.rootCommandBuffer;
      check(commands.commandBuffer == root && commands.commandQueue == queue, "wraps a buffer of the queue");
      id<MTLBuffer> target = floats_buffer(device, {0, 0});
      id<MTLBlitCommandEncoder> blit = [commands blitCommandEncoder];
      [blit fillBuffer:target range:NSMakeRange(0, 4) value:0];
      [blit endEncoding];
      [commands commitAndContinue];
      check(root.status == MTLCommandBufferStatusCompleted, "commitAndContinue commits the wrapped buffer");
      check(commands.commandBuffer != root && commands.rootCommandBuffer == root, "and wraps a new one");
      check(commands.status == MTLCommandBufferStatusNotEnqueued, "which is open");
      MPSGraph* graph = [[MPSGraph new] autorelease];
      MPSGraphTensor* x = [graph placeholderWithShape:@[ @2 ] dataType:MPSDataTypeFloat32 name:@"x"];
      MPSGraphTensor* y = [graph additionWithPrimaryTensor:x secondaryTensor:x name:nil];
      id<MTLBuffer> input = floats_buffer(device, {1.5f, -4});
      [graph encodeToCommandBuffer:commands
                             feeds:@{x : tensor_data(input, @[ @2 ])}
                  targetOperations:nil
                 resultsDictionary:@{y : tensor_data(target, @[ @2 ])}
               executionDescriptor:nil];
      check(floats_of(target, 0, 2) == std::vector<float>({0, 0}), "a graph runs when committed");
      [commands commit];
      check(floats_of(target, 0, 2) == std::vector<float>({3, -8}), "the graph's result");
    });

    run("graph_outlives_its_tensor_data", [&] {
      id<MTLBuffer> input = floats_buffer(device, {2, 3});
      id<MTLBuffer> output = floats_buffer(device, {0, 0});
      id<MTLCommandBuffer> commands = [queue commandBuffer];
      __block int handled = 0;
      @autoreleasepool {
        MPSGraph* graph = [[MPSGraph alloc] init];
        MPSGraphTensor* x = [graph placeholderWithShape:@[ @2 ] dataType:MPSDataTypeFloat32 name:@"x"];
        MPSGraphTensor* y = [graph negativeWithTensor:x name:nil];
        MPSGraphTensorData* in = [[MPSGraphTensorData alloc] initWithMTLBuffer:input shape:@[ @2 ] dataType:MPSDataTypeFloat32];
        MPSGraphTensorData* out = [[MPSGraphTensorData alloc] initWithMTLBuffer:output shape:@[ @2 ] dataType:MPSDataTypeFloat32];
        MPSGraphExecutionDescriptor* descriptor = [[MPSGraphExecutionDescriptor new] autorelease];
        descriptor.completionHandler = ^(MPSGraphTensorDataDictionary* results, NSError* error) {
          handled += results.count == 1 && error == nil;
        };
        [graph encodeToCommandBuffer:(MPSCommandBuffer*)commands
                               feeds:@{x : in}
                    targetOperations:nil
                   resultsDictionary:@{y : out}
                 executionDescriptor:descriptor];
        [in release];
        [out release];
        [graph release];
      }
      [commands commit];
      check(floats_of(output, 0, 2) == std::vector<float>({-2, -3}), "the results, after graph and data were freed");
      check(handled == 1, "the completion handler ran once, with the results");
    });

    run("mpsndarray_strides_and_offsets", [&] {
      id<MTLBuffer> storage = floats_buffer(device, std::vector<float>(10, -1));
      MPSNDArrayDescriptor* descriptor = [MPSNDArrayDescriptor descriptorWithDataType:MPSDataTypeFloat32
                                                                                shape:@[ @2, @3 ]];
      check([descriptor lengthOfDimensionAtIndex:0] == 3 && [descriptor lengthOfDimensionAtIndex:1] == 2,
            "dimension 0 is the fastest-moving");
      MPSNDArray* array = [[[MPSNDArray alloc] initWithBuffer:storage offset:8 descriptor:descriptor] autorelease];
      check(array.numberOfDimensions == 2 && [array lengthOfDimension:0] == 3, "the array's dimensions");
      const float column_major[6] = {0, 3, 1, 4, 2, 5};  // [[0, 1, 2], [3, 4, 5]] stored column by column
      NSInteger strides[2] = {2 * sizeof(float), sizeof(float)};
      [array writeBytes:const_cast<float*>(column_major) strideBytes:strides];
      check(floats_of(storage, 0, 10) == std::vector<float>({-1, -1, 0, 1, 2, 3, 4, 5, -1, -1}),
            "written at the offset, row-major");
      float read[6];
      [array readBytes:read strideBytes:nullptr];
      check(std::vector<float>(read, read + 6) == std::vector<float>({0, 1, 2, 3, 4, 5}), "read back densely");
      check_raises(NSInvalidArgumentException, "needs 24 bytes", [&] {
        [[[MPSNDArray alloc] initWithBuffer:storage offset:20 descriptor:descriptor] autorelease];
      });
      MPSNDArray* owned = [[[MPSNDArray alloc] initWithDevice:device descriptor:descriptor] autorelease];
      check([owned lengthOfDimension:1] == 2 && owned.dataType == MPSDataTypeFloat32, "an array with its own buffer");
    });

    run("graph_through_mpsndarray_offsets", [&] {
      id<MTLBuffer> storage = floats_buffer(device, {9, 1, 2, 3, 4, 9, 9, 9, 9, 9});
      MPSGraph* graph = [[MPSGraph new] autorelease];
      MPSGraphTensor* x = [graph placeholderWithShape:@[ @2, @2 ] dataType:MPSDataTypeFloat32 name:@"x"];
      MPSGraphTensor* y = [graph transposeTensor:x dimension:0 withDimension:1 name:nil];
      MPSNDArrayDescriptor* descriptor = [MPSNDArrayDescriptor descriptorWithDataType:MPSDataTypeFloat32
                                                                                shape:@[ @2, @2 ]];
      MPSNDArray* in = [[[MPSNDArray alloc] initWithBuffer:storage offset:4 descriptor:descriptor] autorelease];
      MPSNDArray* out = [[[MPSNDArray alloc] initWithBuffer:storage offset:24 descriptor:descriptor] autorelease];
      MPSGraphTensorData* out_data = [[[MPSGraphTensorData alloc] initWithMPSNDArray:out] autorelease];
      check(out_data.mpsndarray == out, "the tensor data's array is the one given");
      MPSCommandBuffer* commands = [MPSCommandBuffer commandBufferFromCommandQueue:queue];
      [graph encodeToCommandBuffer:commands
                             feeds:@{x : [[[MPSGraphTensorData alloc] initWithMPSNDArray:in] autorelease]}
                  targetOperations:nil
                 resultsDictionary:@{y : out_data}
               executionDescriptor:nil];
      [commands commit];
      check(floats_of(storage, 0, 10) == std::vector<float>({9, 1, 2, 3, 4, 9, 1, 3, 2, 4}),
            "read and written at the arrays' offsets, nothing else touched");
      MPSGraphTensorDataDictionary* results = [graph runWithFeeds:@{x : tensor_data(storage, @[ @2, @2 ])}
                                                    targetTensors:@[ y ]
                                                 targetOperations:nil];
      float got[4];
      [[results[y] mpsndarray] readBytes:got strideBytes:nullptr];
      check(std::vector<float>(got, got + 4) == std::vector<float>({9, 2, 1, 3}), "runWithFeeds into new data");
      check([results[y].shape isEqualToArray:@[ @2, @2 ]], "of the tensor's shape");
    });

    run("tensors_and_operations", [&] {
      MPSGraph* graph = [[MPSGraph new] autorelease];
      MPSGraphTensor* x = [graph placeholderWithShape:@[ @2, @3 ] dataType:MPSDataTypeFloat16 name:@"x"];
      check([x copy] == x, "a tensor's copy is the tensor");
      [x release];
      check([x.shape isEqualToArray:@[ @2, @3 ]] && x.dataType == MPSDataTypeFloat16, "its shape and type");
      NSArray<MPSGraphTensor*>* top = [graph topKWithSourceTensor:x k:2 name:@"top"];
      check(top.count == 2 && [top[0].shape isEqualToArray:@[ @2, @2 ]] && top[1].dataType == MPSDataTypeInt32,
            "topK gives values and int32 indices");
      check(top[0].operation == top[1].operation && [top[0].operation.name isEqualToString:@"top"],
            "both of one operation");
      check(top[0].operation.inputTensors[0] == x && top[0].operation.graph == graph, "whose input is x");
      MPSGraphTensor* c = [graph constantWithScalar:2 dataType:MPSDataTypeFloat16];
      check([c.shape isEqualToArray:@[ @1 ]], "a scalar constant has shape [1]");
      check(MPSDataTypeBFloat16 == 0x90000010u && MPSDataTypeInt32 == 0x20000020u && MPSDataTypeBool == 0x80000008u,
            "Apple's MPSDataType values");
    });

    run("graph_rejections", [&] {
      MPSGraph* graph = [[MPSGraph new] autorelease];
      MPSGraph* other = [[MPSGraph new] autorelease];
      MPSGraphTensor* a = [graph placeholderWithShape:@[ @2, @3 ] dataType:MPSDataTypeFloat32 name:@"a"];
      MPSGraphTensor* b = [graph placeholderWithShape:@[ @2, @3 ] dataType:MPSDataTypeFloat32 name:@"b"];
      MPSGraphTensor* h = [graph placeholderWithShape:@[ @3 ] dataType:MPSDataTypeFloat16 name:@"h"];
      MPSGraphTensor* stranger = [other placeholderWithShape:@[ @2, @3 ] dataType:MPSDataTypeFloat32 name:@"s"];
      check_raises(NSInvalidArgumentException, "cannot be multiplied",
                   [&] { [graph matrixMultiplicationWithPrimaryTensor:a secondaryTensor:b name:nil]; });
      check_raises(NSInvalidArgumentException, "do not broadcast", [&] {
        [graph additionWithPrimaryTensor:a
                         secondaryTensor:[graph placeholderWithShape:@[ @4 ] dataType:MPSDataTypeFloat32 name:nil]
                                    name:nil];
      });
      check_raises(NSInvalidArgumentException, "float32 and float16 differ",
                   [&] { [graph additionWithPrimaryTensor:a secondaryTensor:h name:nil]; });
      check_raises(NSInvalidArgumentException, "not a tensor of this graph",
                   [&] { [graph negativeWithTensor:stranger name:nil]; });
      check_raises(NSInvalidArgumentException, "cannot be reshaped",
                   [&] { [graph reshapeTensor:a withShape:@[ @4, @2 ] name:nil]; });
      check_raises(NSInvalidArgumentException, "k = 4",
                   [&] { [graph topKWithSourceTensor:a k:4 name:nil]; });
      check_raises(NSInvalidArgumentException, "unranked", [&] {
        [graph placeholderWithShape:nil dataType:MPSDataTypeFloat32 name:nil];
      });
      MPSGraphTensor* sum = [graph additionWithPrimaryTensor:a secondaryTensor:b name:nil];
      id<MTLBuffer> six = floats_buffer(device, std::vector<float>(6, 1));
      id<MTLBuffer> two = floats_buffer(device, {1, 2});
      check_raises(NSInvalidArgumentException, "not a tensor of this graph", [&] {
        [graph runWithFeeds:@{a : tensor_data(six, @[ @2, @3 ]), stranger : tensor_data(six, @[ @2, @3 ])}
              targetTensors:@[ sum ]
           targetOperations:nil];
      });
      check_raises(NSInvalidArgumentException, "placeholder 'b' float32 [2, 3] is needed but not fed", [&] {
        [graph runWithFeeds:@{a : tensor_data(six, @[ @2, @3 ])} targetTensors:@[ sum ] targetOperations:nil];
      });
      check_raises(NSInvalidArgumentException, "tensor data of type float16 for a float32 tensor", [&] {
        [graph runWithFeeds:@{a : tensor_data(six, @[ @2, @3 ], MPSDataTypeFloat16), b : tensor_data(six, @[ @2, @3 ])}
              targetTensors:@[ sum ]
           targetOperations:nil];
      });
      check_raises(NSInvalidArgumentException, "which is not a placeholder", [&] {
        [graph runWithFeeds:@{a : tensor_data(six, @[ @2, @3 ]), b : tensor_data(six, @[ @2, @3 ]),
                              sum : tensor_data(six, @[ @2, @3 ])}
              targetTensors:@[ sum ]
           targetOperations:nil];
      });
      check_raises(NSInvalidArgumentException, "needs 24 bytes; the buffer has 8",
                   [&] { tensor_data(two, @[ @2, @3 ]); });
    });

    run("topk_order_assumed", [&] {
      MPSGraph* graph = [[MPSGraph new] autorelease];
      MPSGraphTensor* x = [graph placeholderWithShape:@[ @7 ] dataType:MPSDataTypeFloat32 name:@"x"];
      NSArray<MPSGraphTensor*>* top = [graph topKWithSourceTensor:x k:7 name:nil];
      const float values[7] = {1, NAN, -NAN, INFINITY, 1, -INFINITY, -0.0f};
      id<MTLBuffer> input = [[device newBufferWithBytes:values length:sizeof values options:MTLResourceStorageModeShared] autorelease];
      MPSGraphTensorDataDictionary* results =
          [graph runWithFeeds:@{x : tensor_data(input, @[ @7 ])} targetTensors:top targetOperations:nil];
      int32_t indices[7];
      [[results[top[1]] mpsndarray] readBytes:indices strideBytes:nullptr];
      check(std::vector<int32_t>(indices, indices + 7) == std::vector<int32_t>({1, 3, 0, 4, 6, 5, 2}),
            "NaN (sign clear) first, -NaN last, equal values lower index first");
    });
  }
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
