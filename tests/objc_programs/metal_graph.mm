// One MPSGraph operation per case, read from stdin, run on shimkit's CPU MPSGraph (objc/), its results written to
// stdout for tests/test_objc_metal.py to compare with torch. Even cases run with runWithFeeds:; odd ones are encoded
// into a command buffer, their feeds and results MPSNDArrays at byte offsets into larger buffers (whose other bytes
// must stay untouched).
//
// A case:  op <name> <parameters...>           (see build() below)
//          in <dtype> <rank> <sizes...> <bytes in hex>   (one line per input, its elements densely)
//          run
// Its answer: out <dtype> <rank> <sizes...> <bytes in hex>   (one line per result), then "done";
//          or "error <NSException reason>".
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr NSUInteger kOffset = 24;  // bytes before (and after) each array of the encoded path
constexpr unsigned char kGuard = 0xa5;

struct Tensor {
  MPSDataType type = MPSDataTypeFloat32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // in the type's own encoding, dense
};

MPSDataType parse_type(const std::string& name) {
  if (name == "float32") return MPSDataTypeFloat32;
  if (name == "float16") return MPSDataTypeFloat16;
  if (name == "bfloat16") return MPSDataTypeBFloat16;
  if (name == "int32") return MPSDataTypeInt32;
  if (name == "int64") return MPSDataTypeInt64;
  if (name == "int16") return MPSDataTypeInt16;
  if (name == "int8") return MPSDataTypeInt8;
  if (name == "uint8") return MPSDataTypeUInt8;
  if (name == "bool") return MPSDataTypeBool;
  [NSException raise:NSInvalidArgumentException format:@"unknown dtype %s", name.c_str()];
  return MPSDataTypeInvalid;
}

const char* type_name(MPSDataType type) {
  switch (type) {
    case MPSDataTypeFloat32: return "float32";
    case MPSDataTypeFloat16: return "float16";
    case MPSDataTypeBFloat16: return "bfloat16";
    case MPSDataTypeInt32: return "int32";
    case MPSDataTypeInt64: return "int64";
    case MPSDataTypeInt16: return "int16";
    case MPSDataTypeInt8: return "int8";
    case MPSDataTypeUInt8: return "uint8";
    default: return "bool";
  }
}

std::size_t size_of(MPSDataType type) { return type == MPSDataTypeBool ? 1 : (type & 0xffffu) / 8; }

std::vector<unsigned char> from_hex(const std::string& text) {
  std::vector<unsigned char> bytes(text.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<unsigned char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  }
  return bytes;
}

std::string to_hex(const std::vector<unsigned char>& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

MPSShape* shape_of(const std::vector<int64_t>& sizes) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray array];
  for (int64_t size : sizes) [shape addObject:@(size)];
  return shape;
}

std::vector<int64_t> sizes_of(MPSShape* shape) {
  std::vector<int64_t> sizes;
  for (NSNumber* size in shape) sizes.push_back([size longLongValue]);
  return sizes;
}

std::size_t count_of(const std::vector<int64_t>& sizes) {
  std::size_t count = 1;
  for (int64_t size : sizes) count *= static_cast<std::size_t>(size);
  return count;
}

std::vector<int64_t> read_sizes(std::istringstream& line) {
  int rank = 0;
  line >> rank;
  std::vector<int64_t> sizes(static_cast<std::size_t>(rank));
  for (int64_t& size : sizes) line >> size;
  return sizes;
}

// The graph's results for `inputs` placeholders and the operation `op` describes.
NSArray<MPSGraphTensor*>* build(MPSGraph* graph, std::istringstream& op, NSArray<MPSGraphTensor*>* inputs) {
  std::string name;
  op >> name;
  MPSGraphTensor* a = inputs.count > 0 ? inputs[0] : nil;
  MPSGraphTensor* b = inputs.count > 1 ? inputs[1] : nil;
  if (name == "add") return @[ [graph additionWithPrimaryTensor:a secondaryTensor:b name:nil] ];
  if (name == "sub") return @[ [graph subtractionWithPrimaryTensor:a secondaryTensor:b name:nil] ];
  if (name == "mul") return @[ [graph multiplicationWithPrimaryTensor:a secondaryTensor:b name:nil] ];
  if (name == "div") return @[ [graph divisionWithPrimaryTensor:a secondaryTensor:b name:nil] ];
  if (name == "neg") return @[ [graph negativeWithTensor:a name:nil] ];
  if (name == "matmul") return @[ [graph matrixMultiplicationWithPrimaryTensor:a secondaryTensor:b name:nil] ];
  if (name == "transpose") {
    // Signed: a negative dimension counts from the end, as the NSUInteger Apple declares it wraps to (upstream's
    // op_mm.mm and PyTorch's MPS operations pass -2 and -1).
    NSInteger first = 0, second = 0;
    op >> first >> second;
    return @[ [graph transposeTensor:a dimension:static_cast<NSUInteger>(first)
                       withDimension:static_cast<NSUInteger>(second)
                                name:nil] ];
  }
  if (name == "broadcast") return @[ [graph broadcastTensor:a toShape:shape_of(read_sizes(op)) name:nil] ];
  if (name == "reshape") return @[ [graph reshapeTensor:a withShape:shape_of(read_sizes(op)) name:nil] ];
  if (name == "cast") {
    std::string type;
    op >> type;
    return @[ [graph castTensor:a toType:parse_type(type) name:nil] ];
  }
  if (name == "scale") {  // a times a constant of its type, of shape [1] or of a's shape
    std::string written, form;
    op >> written >> form;
    const double scalar = std::strtod(written.c_str(), nullptr);
    MPSGraphTensor* constant = form == "scalar" ? [graph constantWithScalar:scalar dataType:a.dataType]
                                                : [graph constantWithScalar:scalar shape:a.shape dataType:a.dataType];
    return @[ [graph multiplicationWithPrimaryTensor:a secondaryTensor:constant name:nil] ];
  }
  if (name == "topk") {
    NSUInteger k = 0;
    op >> k;
    return [graph topKWithSourceTensor:a k:k name:nil];
  }
  if (name == "conv2d") {
    NSUInteger sx, sy, dx, dy, groups, left, right, top, bottom, style, data, weights;
    op >> sx >> sy >> dx >> dy >> groups >> left >> right >> top >> bottom >> style >> data >> weights;
    MPSGraphConvolution2DOpDescriptor* descriptor =
        [MPSGraphConvolution2DOpDescriptor descriptorWithStrideInX:sx
                                                         strideInY:sy
                                                   dilationRateInX:dx
                                                   dilationRateInY:dy
                                                            groups:groups
                                                       paddingLeft:left
                                                      paddingRight:right
                                                        paddingTop:top
                                                     paddingBottom:bottom
                                                      paddingStyle:static_cast<MPSGraphPaddingStyle>(style)
                                                        dataLayout:static_cast<MPSGraphTensorNamedDataLayout>(data)
                                                     weightsLayout:static_cast<MPSGraphTensorNamedDataLayout>(weights)];
    return @[ [graph convolution2DWithSourceTensor:a weightsTensor:b descriptor:descriptor name:nil] ];
  }
  [NSException raise:NSInvalidArgumentException format:@"unknown op %s", name.c_str()];
  return nil;
}

// An array of `type` and `sizes` at kOffset into a buffer of guard bytes, which `buffers` collects.
MPSNDArray* guarded_array(id<MTLDevice> device, MPSDataType type, const std::vector<int64_t>& sizes,
                          NSMutableArray* buffers) {
  const NSUInteger bytes = count_of(sizes) * size_of(type);
  id<MTLBuffer> buffer = [[device newBufferWithLength:bytes + 2 * kOffset options:MTLResourceStorageModeShared] autorelease];
  std::memset([buffer contents], kGuard, bytes + 2 * kOffset);
  [buffers addObject:buffer];
  return [[[MPSNDArray alloc] initWithBuffer:buffer
                                      offset:kOffset
                                  descriptor:[MPSNDArrayDescriptor descriptorWithDataType:type shape:shape_of(sizes)]]
      autorelease];
}

bool guards_intact(NSArray* buffers) {
  for (id<MTLBuffer> buffer in buffers) {
    const unsigned char* bytes = static_cast<const unsigned char*>([buffer contents]);
    const NSUInteger length = [buffer length];
    for (NSUInteger i = 0; i < length; ++i) {
      if ((i < kOffset || i >= length - kOffset) && bytes[i] != kGuard) return false;
    }
  }
  return true;
}

void run_case(id<MTLDevice> device, id<MTLCommandQueue> queue, const std::string& op_line,
              const std::vector<Tensor>& tensors, bool encoded) {
  MPSGraph* graph = [[MPSGraph new] autorelease];
  NSMutableArray<MPSGraphTensor*>* placeholders = [NSMutableArray array];
  NSMutableDictionary<MPSGraphTensor*, MPSGraphTensorData*>* feeds = [NSMutableDictionary dictionary];
  NSMutableArray* guarded = [NSMutableArray array];
  for (const Tensor& tensor : tensors) {
    MPSGraphTensor* placeholder = [graph placeholderWithShape:shape_of(tensor.shape) dataType:tensor.type name:nil];
    [placeholders addObject:placeholder];
    std::vector<unsigned char> bytes = tensor.bytes;
    bytes.resize(count_of(tensor.shape) * size_of(tensor.type));
    if (encoded) {
      MPSNDArray* array = guarded_array(device, tensor.type, tensor.shape, guarded);
      [array writeBytes:bytes.data() strideBytes:nullptr];
      feeds[placeholder] = [[[MPSGraphTensorData alloc] initWithMPSNDArray:array] autorelease];
    } else {
      id<MTLBuffer> buffer = [[device newBufferWithBytes:bytes.data()
                                                  length:bytes.size()
                                                 options:MTLResourceStorageModeShared] autorelease];
      feeds[placeholder] = [[[MPSGraphTensorData alloc] initWithMTLBuffer:buffer
                                                                    shape:shape_of(tensor.shape)
                                                                 dataType:tensor.type] autorelease];
    }
  }
  std::istringstream op(op_line);
  NSArray<MPSGraphTensor*>* targets = build(graph, op, placeholders);
  MPSGraphTensorDataDictionary* results = nil;
  if (encoded) {
    NSMutableDictionary<MPSGraphTensor*, MPSGraphTensorData*>* outputs = [NSMutableDictionary dictionary];
    for (MPSGraphTensor* target in targets) {
      MPSNDArray* array = guarded_array(device, target.dataType, sizes_of(target.shape), guarded);
      outputs[target] = [[[MPSGraphTensorData alloc] initWithMPSNDArray:array] autorelease];
    }
    MPSCommandBuffer* commands = [MPSCommandBuffer commandBufferFromCommandQueue:queue];
    [graph encodeToCommandBuffer:commands feeds:feeds targetOperations:nil resultsDictionary:outputs executionDescriptor:nil];
    [commands commit];
    [commands waitUntilCompleted];
    results = outputs;
  } else {
    results = [graph runWithFeeds:feeds targetTensors:targets targetOperations:nil];
  }
  std::string answer;
  for (MPSGraphTensor* target in targets) {
    MPSGraphTensorData* data = results[target];
    const std::vector<int64_t> sizes = sizes_of(data.shape);
    std::vector<unsigned char> bytes(count_of(sizes) * size_of(data.dataType));
    MPSNDArray* array = [data mpsndarray];
    [array readBytes:bytes.data() strideBytes:nullptr];
    answer += std::string("out ") + type_name(data.dataType) + " " + std::to_string(sizes.size());
    for (int64_t size : sizes) answer += " " + std::to_string(size);
    answer += " " + to_hex(bytes) + "\n";
  }
  if (!guards_intact(guarded)) {
    std::puts("error bytes around an array were written");
    return;
  }
  std::fputs(answer.c_str(), stdout);
  std::puts("done");
}

}  // namespace

int main() {
  @autoreleasepool {
    id<MTLDevice> device = [MTLCreateSystemDefaultDevice() autorelease];
    id<MTLCommandQueue> queue = [[device newCommandQueue] autorelease];
    std::string line, op_line;
    std::vector<Tensor> tensors;
    int index = 0;
    while (std::getline(std::cin, line)) {
      std::istringstream words(line);
      std::string kind;
      words >> kind;
      if (kind == "op") {
        std::getline(words, op_line);
        tensors.clear();
      } else if (kind == "in") {
        Tensor tensor;
        std::string type;
        words >> type;
        tensor.type = parse_type(type);
        tensor.shape = read_sizes(words);
        std::string hex;
        words >> hex;
        tensor.bytes = from_hex(hex);
        tensors.push_back(tensor);
      } else if (kind == "run") {
        @autoreleasepool {
          @try {
            run_case(device, queue, op_line, tensors, index % 2 == 1);
          } @catch (NSException* exception) {
            std::printf("error %s\n", [[exception reason] UTF8String]);
          }
        }
        ++index;
      }
    }
  }
  return 0;
}
