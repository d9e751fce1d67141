// addmm on Metal through MPSGraph. See addmm_metal.h (on Linux: shimkit.objc, tests/test_objc_addmm.py).
//
// Mirrors the structure of ExecuTorch's runtime/ops/op_mm.mm (buffer lookup, graph cache, feeds,
// execution, release), but every decision that op_mm.mm makes inline -- and gets wrong for a
// transposed self, a cache key missing an input's shape, an out of the wrong shape -- comes from the
// portable, tested plan. The graph is built from the plan's key fields only, so equal keys build
// equal graphs.
// Objective-C++ (MPSGraph): compiled only where __OBJC__ is defined. The Linux stand-in of the Metal
// runtime compiles runtime sources as C++, where this file is empty (runtime/native/fallbacks/addmm.cpp
// runs the same plan there).
#ifdef __OBJC__
#include "addmm_metal.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#if __has_feature(objc_arc)
#error "addmm_metal.mm releases its objects explicitly (as ExecuTorch's Metal ops do): build without ARC"
#endif

namespace shimkit {
namespace addmm {
namespace {

struct CachedGraph {
  MPSGraph* graph = nil;  // owned by the cache for the life of the process, like op_mm.mm's
  MPSGraphTensor* self = nil;
  MPSGraphTensor* mat1 = nil;
  MPSGraphTensor* mat2 = nil;
  MPSGraphTensor* out = nil;
};

std::mutex cache_mutex;
std::unordered_map<CacheKey, CachedGraph, CacheKeyHash> graph_cache;

MPSDataType mps_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPSDataTypeFloat32;
    case DType::kBFloat16:
      return MPSDataTypeBFloat16;
    case DType::kFloat16:
      return MPSDataTypeFloat16;
  }
  return MPSDataTypeInvalid;
}

NSArray<NSNumber*>* ns_shape(const std::vector<int64_t>& sizes) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:sizes.size()];
  for (int64_t size : sizes) [shape addObject:@(size)];
  return shape;
}

// A placeholder fed as `feed` says, turned into the logical [rows, cols] operand in float32.
MPSGraphTensor* operand(MPSGraph* graph, const Feed& feed, DType dtype, int64_t rows, int64_t cols,
                        NSString* name, MPSGraphTensor** placeholder) {
  *placeholder = [graph placeholderWithShape:ns_shape(feed.shape) dataType:mps_type(dtype) name:name];
  MPSGraphTensor* tensor = *placeholder;
  if (feed.kind == FeedKind::kTransposed) {
    tensor = [graph transposeTensor:tensor dimension:0 withDimension:1 name:nil];
  }
  std::vector<int64_t> fed = feed.kind == FeedKind::kTransposed
                                 ? std::vector<int64_t>{feed.shape[1], feed.shape[0]}
                                 : feed.shape;
  if (fed != std::vector<int64_t>{rows, cols}) {
    tensor = [graph broadcastTensor:tensor toShape:ns_shape({rows, cols}) name:nil];
  }
  // Accumulate in float32 for the 16-bit types, as the reference kernel does.
  if (dtype != DType::kFloat32) {
    tensor = [graph castTensor:tensor toType:MPSDataTypeFloat32 name:nil];
  }
  return tensor;
}

// Reads only fields that make_plan writes into the cache key.
CachedGraph build_graph(const Plan& plan) {
  CachedGraph cached;
  MPSGraph* graph = [MPSGraph new];
  cached.graph = graph;
  MPSGraphTensor* result = nil;
  if (plan.uses_product) {
    MPSGraphTensor* a = operand(graph, plan.mat1_feed, plan.dtype, plan.m, plan.k, @"mat1", &cached.mat1);
    MPSGraphTensor* b = operand(graph, plan.mat2_feed, plan.dtype, plan.k, plan.n, @"mat2", &cached.mat2);
    result = [graph matrixMultiplicationWithPrimaryTensor:a secondaryTensor:b name:nil];
    if (plan.alpha != 1.0f) {
      MPSGraphTensor* alpha = [graph constantWithScalar:plan.alpha dataType:MPSDataTypeFloat32];
      result = [graph multiplicationWithPrimaryTensor:result secondaryTensor:alpha name:nil];
    }
  }
  if (plan.uses_self) {
    MPSGraphTensor* bias = operand(graph, plan.self_feed, plan.dtype, plan.m, plan.n, @"self", &cached.self);
    if (plan.beta != 1.0f) {
      MPSGraphTensor* beta = [graph constantWithScalar:plan.beta dataType:MPSDataTypeFloat32];
      bias = [graph multiplicationWithPrimaryTensor:bias secondaryTensor:beta name:nil];
    }
    result = result ? [graph additionWithPrimaryTensor:result secondaryTensor:bias name:nil] : bias;
  }
  if (result == nil) {  // beta == 0 and no product: out is zeros
    result = [graph constantWithScalar:0.0 shape:ns_shape({plan.m, plan.n}) dataType:MPSDataTypeFloat32];
  }
  if (plan.dtype != DType::kFloat32) {
    result = [graph castTensor:result toType:mps_type(plan.dtype) name:nil];
  }
  if (plan.out_feed.kind == FeedKind::kTransposed) {
    result = [graph transposeTensor:result dimension:0 withDimension:1 name:@"out"];
  }
  cached.out = result;
  return cached;
}

// Owns the Objective-C objects made for one call, releasing them on every path.
struct CallObjects {
  std::vector<id> objects;
  ~CallObjects() {
    for (id object : objects) [object release];
  }
  template <class T>
  T keep(T object) {
    if (object != nil) objects.push_back(object);
    return object;
  }
};

// The tensor data for `view` (broadcast dimensions already dropped) as `feed` says: its own buffer,
// or for kPacked a staging buffer, filled here for an input and unpacked by the caller for out.
Status tensor_data(const Feed& feed, const TensorView& view, DType dtype, metal::Host& host,
                   CallObjects& call, const char* name, bool is_output, id<MTLBuffer>* packed,
                   MPSGraphTensorData** data) {
  NSArray<NSNumber*>* shape = ns_shape(feed.shape);
  if (feed.kind == FeedKind::kPacked) {
    NSUInteger bytes = static_cast<NSUInteger>(view.numel()) * element_size(dtype);
    *packed = call.keep([host.device() newBufferWithLength:bytes options:MTLResourceStorageModeShared]);
    if (*packed == nil) return Status::internal(std::string("could not allocate a buffer to pack ") + name);
    if (!is_output) {
      host.synchronize();  // earlier GPU work may still be writing view's memory
      pack_dense(view, [*packed contents]);
    }
    *data = call.keep([[MPSGraphTensorData alloc] initWithMTLBuffer:*packed shape:shape dataType:mps_type(dtype)]);
    return Status::ok();
  }
  NSUInteger offset = 0;
  id<MTLBuffer> buffer = host.buffer_for(view.data, &offset);
  if (buffer == nil) {
    return Status::invalid_argument(std::string(name) + " is not in a Metal buffer of this runtime");
  }
  if (offset == 0) {
    *data = call.keep([[MPSGraphTensorData alloc] initWithMTLBuffer:buffer shape:shape dataType:mps_type(dtype)]);
    return Status::ok();
  }
  // MPSGraphTensorData reads a buffer from its start; an offset needs an MPSNDArray over it.
  MPSNDArrayDescriptor* descriptor = [MPSNDArrayDescriptor descriptorWithDataType:mps_type(dtype) shape:shape];
  MPSNDArray* array = call.keep([[MPSNDArray alloc] initWithBuffer:buffer offset:offset descriptor:descriptor]);
  *data = call.keep([[MPSGraphTensorData alloc] initWithMPSNDArray:array]);
  return Status::ok();
}

}  // namespace

Status run_metal(const Plan& plan, const Operands& ops, metal::Host& host) {
  if (ops.mat1.device.type != DeviceType::kMPS) {
    return Status::unsupported("addmm: the Metal kernel needs mps tensors, got " + device_name(ops.mat1.device));
  }
  if (plan.output_empty) return Status::ok();
  Status status;
  @autoreleasepool {
    CallObjects call;
    @try {
      CachedGraph graph;
      {
        std::lock_guard<std::mutex> lock(cache_mutex);
        auto found = graph_cache.find(plan.cache_key);
        if (found == graph_cache.end()) found = graph_cache.emplace(plan.cache_key, build_graph(plan)).first;
        graph = found->second;
      }
      NSMutableDictionary* feeds = [NSMutableDictionary dictionary];
      id<MTLBuffer> unused = nil;
      MPSGraphTensorData* data = nil;
      if (plan.uses_self) {
        SHIMKIT_RETURN_IF_ERROR(tensor_data(plan.self_feed, unbroadcast(plan.self_expanded), plan.dtype,
                                            host, call, "self", false, &unused, &data));
        feeds[graph.self] = data;
      }
      if (plan.uses_product) {
        SHIMKIT_RETURN_IF_ERROR(tensor_data(plan.mat1_feed, unbroadcast(ops.mat1), plan.dtype, host,
                                            call, "mat1", false, &unused, &data));
        feeds[graph.mat1] = data;
        SHIMKIT_RETURN_IF_ERROR(tensor_data(plan.mat2_feed, unbroadcast(ops.mat2), plan.dtype, host,
                                            call, "mat2", false, &unused, &data));
        feeds[graph.mat2] = data;
      }
      id<MTLBuffer> out_staging = nil;
      SHIMKIT_RETURN_IF_ERROR(tensor_data(plan.out_feed, ops.out, plan.dtype, host, call, "out", true,
                                          &out_staging, &data));
      const bool unpack_out = plan.out_feed.kind == FeedKind::kPacked;
      host.run_graph(graph.graph, feeds, @{graph.out : data}, /*wait=*/unpack_out);
      if (unpack_out) unpack_dense([out_staging contents], ops.out);
      status = Status::ok();
    } @catch (NSException* exception) {
      status = Status::internal(std::string("MPSGraph raised ") + [[exception name] UTF8String] + ": " +
                                [[exception reason] UTF8String]);
    }
    // `call` releases every object made above on all paths, exceptions included.
  }
  return status;
}

}  // namespace addmm
}  // namespace shimkit

#endif  // __OBJC__
