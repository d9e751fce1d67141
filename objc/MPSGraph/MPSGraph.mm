// MetalPerformanceShadersGraph on the CPU (objc/include/MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h):
// the Objective-C objects over graph_cpu.h's graph. An MPSGraph records each operation as it is built; running it
// evaluates what its targets need, reading the feeds' buffers and writing the results' buffers.
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <Block.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#import "../Metal/MTLStandIn.h"
#import "MPSStandIn.h"
#include "graph_cpu.h"

namespace mps = shimkit::mpsgraph;

namespace {

[[noreturn]] void raise_invalid(NSString* reason) {
  @throw [NSException exceptionWithName:NSInvalidArgumentException reason:reason userInfo:nil];
}

// One +1 reference, shared by the copies of a command that needs the object when it runs.
std::shared_ptr<void> keep_alive(id object) {
  return std::shared_ptr<void>([object retain], [](void* kept) { [(id)kept release]; });
}

// Where a tensor's value is read from (a feed) or written to (a result) when the graph runs.
struct Binding {
  int tensor;
  id<ShimkitBufferStorage> storage;  // kept alive by the command buffer or the caller, as Metal's resources are
  NSUInteger offset;
};

void run_graph(const mps::Graph& graph, const std::vector<Binding>& feeds, const std::vector<Binding>& results,
               const std::vector<int>& other_targets) {
  std::vector<std::pair<int, mps::Array>> values;
  for (const Binding& feed : feeds) {
    const mps::TensorInfo& info = graph.tensor(feed.tensor);
    values.emplace_back(feed.tensor,
                        mps::load_array(static_cast<char*>([feed.storage shimkit_bytes]) + feed.offset, info.shape,
                                        info.type));
  }
  std::vector<int> targets;
  for (const Binding& result : results) targets.push_back(result.tensor);
  targets.insert(targets.end(), other_targets.begin(), other_targets.end());
  // Every input is read before any result is written, so a result may share a feed's memory.
  const std::vector<mps::Array> computed = graph.evaluate(values, targets);
  for (std::size_t i = 0; i < results.size(); ++i) {
    mps::store_array(computed[i], static_cast<char*>([results[i].storage shimkit_bytes]) + results[i].offset);
  }
}

}  // namespace

@implementation MPSGraphObject
@end

// -- Tensors and operations ----------------------------------------------------------------------------------

@interface MPSGraph ()
- (const mps::Graph&)shimkit_core;
- (MPSGraphTensor*)shimkit_tensor:(int)tensor;
- (MPSGraphOperation*)shimkit_operation:(int)op;
@end

@interface MPSGraphTensor ()
- (instancetype)shimkit_initWithGraph:(MPSGraph*)graph tensor:(int)tensor;
- (MPSGraph*)shimkit_graph;
- (int)shimkit_id;
@end

@implementation MPSGraphTensor {
  MPSGraph* _graph;  // not retained: the graph owns its tensors
  int _id;
}
- (instancetype)shimkit_initWithGraph:(MPSGraph*)graph tensor:(int)tensor {
  if ((self = [super init])) {
    _graph = graph;
    _id = tensor;
  }
  return self;
}
- (MPSGraph*)shimkit_graph {
  return _graph;
}
- (int)shimkit_id {
  return _id;
}
- (MPSShape*)shape {
  return shimkit_mps_shape([_graph shimkit_core].tensor(_id).shape);
}
- (MPSDataType)dataType {
  return [_graph shimkit_core].tensor(_id).type;
}
- (MPSGraphOperation*)operation {
  return [_graph shimkit_operation:[_graph shimkit_core].tensor(_id).op];
}
- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}
@end

@interface MPSGraphOperation ()
- (instancetype)shimkit_initWithGraph:(MPSGraph*)graph op:(int)op name:(NSString*)name;
@end

@implementation MPSGraphOperation {
  MPSGraph* _graph;  // not retained: the graph owns its operations
  int _op;
  NSString* _name;
}
- (instancetype)shimkit_initWithGraph:(MPSGraph*)graph op:(int)op name:(NSString*)name {
  if ((self = [super init])) {
    _graph = graph;
    _op = op;
    _name = [(name ?: @"") copy];
  }
  return self;
}
- (void)dealloc {
  [_name release];
  [super dealloc];
}
- (NSArray<MPSGraphTensor*>*)tensorsOf:(const std::vector<int>&)ids {
  NSMutableArray<MPSGraphTensor*>* tensors = [NSMutableArray arrayWithCapacity:ids.size()];
  for (int id : ids) [tensors addObject:[_graph shimkit_tensor:id]];
  return tensors;
}
- (NSArray<MPSGraphTensor*>*)inputTensors {
  return [self tensorsOf:[_graph shimkit_core].op_inputs(_op)];
}
- (NSArray<MPSGraphTensor*>*)outputTensors {
  return [self tensorsOf:[_graph shimkit_core].op_outputs(_op)];
}
- (MPSGraph*)graph {
  return _graph;
}
- (NSString*)name {
  return _name;
}
- (id)copyWithZone:(NSZone*)zone {
  return [self retain];
}
@end

// -- Tensor data ---------------------------------------------------------------------------------------------

@interface MPSGraphTensorData ()
// Where `tensor` of `graph` is read or written, after the checks MPSGraph asserts; `role` names it in errors.
- (Binding)shimkit_bindingFor:(int)tensor of:(const mps::Graph&)graph role:(const char*)role;
- (id<MTLBuffer>)shimkit_buffer;
@end

@implementation MPSGraphTensorData {
  id<MTLBuffer> _buffer;
  NSUInteger _offset;
  MPSShape* _shape;
  MPSDataType _dataType;
  MPSNDArray* _ndarray;  // the one given, or made on first -mpsndarray
}

- (instancetype)initWithMTLBuffer:(id<MTLBuffer>)buffer shape:(MPSShape*)shape dataType:(MPSDataType)dataType {
  if (!(self = [super init])) return nil;
  @try {
    shimkit_buffer_storage(buffer, "initWithMTLBuffer:shape:dataType: the buffer");
    const std::vector<int64_t> sizes = shimkit_shape_of(shape, "initWithMTLBuffer:shape:dataType:");
    const NSUInteger bytes = shimkit_raising("initWithMTLBuffer:shape:dataType:", [&] {
      return static_cast<NSUInteger>(mps::element_count(sizes)) * mps::element_size(dataType);
    });
    if (bytes > [buffer length]) {
      raise_invalid([NSString stringWithFormat:@"initWithMTLBuffer:shape:dataType: %s %s needs %lu bytes; the buffer "
                                               @"has %lu",
                                               mps::type_name(dataType).c_str(), mps::shape_text(sizes).c_str(), bytes,
                                               [buffer length]]);
    }
  } @catch (NSException* exception) {
    [self release];
    @throw;
  }
  _buffer = [buffer retain];
  _shape = [shape copy];
  _dataType = dataType;
  return self;
}

- (instancetype)initWithMPSNDArray:(MPSNDArray*)ndarray {
  if ((self = [super init])) {
    _ndarray = [ndarray retain];
    _buffer = [[ndarray shimkit_buffer] retain];
    _offset = [ndarray shimkit_offset];
    _shape = [[[ndarray descriptor] getShape] retain];
    _dataType = [ndarray dataType];
  }
  return self;
}

- (void)dealloc {
  [_ndarray release];
  [_shape release];
  [_buffer release];
  [super dealloc];
}

- (MPSShape*)shape {
  return _shape;
}
- (MPSDataType)dataType {
  return _dataType;
}
- (MPSNDArray*)mpsndarray {
  if (_ndarray == nil) {
    _ndarray = [[MPSNDArray alloc] initWithBuffer:_buffer
                                           offset:_offset
                                       descriptor:[MPSNDArrayDescriptor descriptorWithDataType:_dataType shape:_shape]];
  }
  return _ndarray;
}

- (Binding)shimkit_bindingFor:(int)tensor of:(const mps::Graph&)graph role:(const char*)role {
  const mps::TensorInfo& info = graph.tensor(tensor);
  if (_dataType != info.type) {
    raise_invalid([NSString stringWithFormat:@"%s: tensor data of type %s for a %s tensor", role,
                                             mps::type_name(_dataType).c_str(), mps::type_name(info.type).c_str()]);
  }
  const NSUInteger needed = static_cast<NSUInteger>(mps::element_count(info.shape)) * mps::element_size(info.type);
  if (needed > [_buffer length] - _offset) {
    raise_invalid([NSString stringWithFormat:@"%s: the tensor is %s %s (%lu bytes) but its tensor data's buffer holds "
                                             @"%lu bytes from offset %lu",
                                             role, mps::type_name(info.type).c_str(), mps::shape_text(info.shape).c_str(),
                                             needed, [_buffer length] - _offset, _offset]);
  }
  return {tensor, shimkit_buffer_storage(_buffer, role), _offset};
}

- (id<MTLBuffer>)shimkit_buffer {
  return _buffer;
}
@end

// -- Descriptors ---------------------------------------------------------------------------------------------

@implementation MPSGraphExecutionDescriptor {
  MPSGraphExecutionCompletionHandler _completionHandler;  // a copy
}
@synthesize waitUntilCompleted = _waitUntilCompleted;

- (void)dealloc {
  if (_completionHandler) Block_release(_completionHandler);
  [super dealloc];
}
- (MPSGraphExecutionCompletionHandler)completionHandler {
  return _completionHandler;
}
- (void)setCompletionHandler:(MPSGraphExecutionCompletionHandler)handler {
  MPSGraphExecutionCompletionHandler copied = handler ? Block_copy(handler) : handler;
  if (_completionHandler) Block_release(_completionHandler);
  _completionHandler = copied;
}
@end

@implementation MPSGraphConvolution2DOpDescriptor
@synthesize strideInX = _strideInX, strideInY = _strideInY;
@synthesize dilationRateInX = _dilationRateInX, dilationRateInY = _dilationRateInY;
@synthesize paddingLeft = _paddingLeft, paddingRight = _paddingRight;
@synthesize paddingTop = _paddingTop, paddingBottom = _paddingBottom;
@synthesize paddingStyle = _paddingStyle, dataLayout = _dataLayout, weightsLayout = _weightsLayout;
@synthesize groups = _groups;

- (instancetype)init {
  if ((self = [super init])) {
    _strideInX = _strideInY = _dilationRateInX = _dilationRateInY = _groups = 1;
    _paddingStyle = MPSGraphPaddingStyleExplicit;
    _dataLayout = MPSGraphTensorNamedDataLayoutNCHW;
    _weightsLayout = MPSGraphTensorNamedDataLayoutOIHW;
  }
  return self;
}

+ (instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
                              strideInY:(NSUInteger)strideInY
                        dilationRateInX:(NSUInteger)dilationRateInX
                        dilationRateInY:(NSUInteger)dilationRateInY
                                 groups:(NSUInteger)groups
                           paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                             dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout
                          weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout {
  MPSGraphConvolution2DOpDescriptor* descriptor = [[[self alloc] init] autorelease];
  descriptor.strideInX = strideInX;
  descriptor.strideInY = strideInY;
  descriptor.dilationRateInX = dilationRateInX;
  descriptor.dilationRateInY = dilationRateInY;
  descriptor.groups = groups;
  descriptor.paddingStyle = paddingStyle;
  descriptor.dataLayout = dataLayout;
  descriptor.weightsLayout = weightsLayout;
  return descriptor;
}

+ (instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
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
                          weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout {
  MPSGraphConvolution2DOpDescriptor* descriptor = [self descriptorWithStrideInX:strideInX
                                                                      strideInY:strideInY
                                                                dilationRateInX:dilationRateInX
                                                                dilationRateInY:dilationRateInY
                                                                         groups:groups
                                                                   paddingStyle:paddingStyle
                                                                     dataLayout:dataLayout
                                                                  weightsLayout:weightsLayout];
  [descriptor setExplicitPaddingWithPaddingLeft:paddingLeft
                                   paddingRight:paddingRight
                                     paddingTop:paddingTop
                                  paddingBottom:paddingBottom];
  return descriptor;
}

- (void)setExplicitPaddingWithPaddingLeft:(NSUInteger)paddingLeft
                             paddingRight:(NSUInteger)paddingRight
                               paddingTop:(NSUInteger)paddingTop
                            paddingBottom:(NSUInteger)paddingBottom {
  _paddingLeft = paddingLeft;
  _paddingRight = paddingRight;
  _paddingTop = paddingTop;
  _paddingBottom = paddingBottom;
}

- (id)copyWithZone:(NSZone*)zone {
  return [[MPSGraphConvolution2DOpDescriptor descriptorWithStrideInX:_strideInX
                                                           strideInY:_strideInY
                                                     dilationRateInX:_dilationRateInX
                                                     dilationRateInY:_dilationRateInY
                                                              groups:_groups
                                                         paddingLeft:_paddingLeft
                                                        paddingRight:_paddingRight
                                                          paddingTop:_paddingTop
                                                       paddingBottom:_paddingBottom
                                                        paddingStyle:_paddingStyle
                                                          dataLayout:_dataLayout
                                                       weightsLayout:_weightsLayout] retain];
}
@end

// -- The graph -----------------------------------------------------------------------------------------------

@implementation MPSGraph {
  mps::Graph* _core;
  NSMutableArray<MPSGraphTensor*>* _tensors;        // by tensor id
  NSMutableArray<MPSGraphOperation*>* _operations;  // by operation id
}

- (instancetype)init {
  if ((self = [super init])) {
    _core = new mps::Graph();
    _tensors = [[NSMutableArray alloc] init];
    _operations = [[NSMutableArray alloc] init];
  }
  return self;
}

- (void)dealloc {
  [_operations release];
  [_tensors release];
  delete _core;
  [super dealloc];
}

- (const mps::Graph&)shimkit_core {
  return *_core;
}
- (MPSGraphTensor*)shimkit_tensor:(int)tensor {
  return [_tensors objectAtIndex:static_cast<NSUInteger>(tensor)];
}
- (MPSGraphOperation*)shimkit_operation:(int)op {
  return [_operations objectAtIndex:static_cast<NSUInteger>(op)];
}

// "placeholder 'self'" or "a tensor made by 'out'": how errors name a tensor.
- (NSString*)describe:(int)tensor {
  MPSGraphOperation* operation = [self shimkit_operation:_core->tensor(tensor).op];
  return [NSString stringWithFormat:@"%@ '%@' %s %s", _core->is_placeholder(tensor) ? @"placeholder" : @"tensor",
                                    operation.name, mps::type_name(_core->tensor(tensor).type).c_str(),
                                    mps::shape_text(_core->tensor(tensor).shape).c_str()];
}

- (int)idOf:(MPSGraphTensor*)tensor method:(const char*)method {
  if (![tensor isKindOfClass:[MPSGraphTensor class]] || [tensor shimkit_graph] != self) {
    raise_invalid([NSString stringWithFormat:@"%s %@ is not a tensor of this graph", method, tensor]);
  }
  return [tensor shimkit_id];
}

// Adds the operation `build` appends to the core graph, with its Objective-C operation and tensors.
- (MPSGraphOperation*)record:(const char*)method name:(NSString*)name build:(const std::function<void(mps::Graph&)>&)build {
  shimkit_raising(method, [&] { build(*_core); });
  const int op = _core->ops() - 1;
  MPSGraphOperation* operation = [[MPSGraphOperation alloc] shimkit_initWithGraph:self op:op name:name];
  [_operations addObject:operation];
  [operation release];
  for (int id : _core->op_outputs(op)) {
    MPSGraphTensor* tensor = [[MPSGraphTensor alloc] shimkit_initWithGraph:self tensor:id];
    [_tensors addObject:tensor];
    [tensor release];
  }
  return operation;
}

- (MPSGraphTensor*)recordTensor:(const char*)method name:(NSString*)name build:(const std::function<void(mps::Graph&)>&)build {
  return [[self record:method name:name build:build].outputTensors objectAtIndex:0];
}

// -- Running ---------------------------------------------------------------------------------------------------

- (std::vector<Binding>)bindFeeds:(NSDictionary*)feeds method:(const char*)method targets:(const std::vector<int>&)targets {
  std::vector<Binding> bindings;
  for (id key in [feeds allKeys]) {
    const int tensor = [self idOf:key method:method];
    if (!_core->is_placeholder(tensor)) {
      raise_invalid([NSString stringWithFormat:@"%s feeds a value for %@, which is not a placeholder", method,
                                               [self describe:tensor]]);
    }
    MPSGraphTensorData* data = [feeds objectForKey:key];
    NSString* role = [NSString stringWithFormat:@"%s the feed for %@", method, [self describe:tensor]];
    bindings.push_back([data shimkit_bindingFor:tensor of:*_core role:[role UTF8String]]);
  }
  for (int needed : _core->placeholders_needed(targets)) {
    bool fed = false;
    for (const Binding& binding : bindings) fed = fed || binding.tensor == needed;
    if (!fed) raise_invalid([NSString stringWithFormat:@"%s %@ is needed but not fed", method, [self describe:needed]]);
  }
  return bindings;
}

- (std::vector<int>)targetsOf:(NSArray<MPSGraphOperation*>*)operations method:(const char*)method {
  std::vector<int> targets;
  for (MPSGraphOperation* operation in operations) {
    if (![operation isKindOfClass:[MPSGraphOperation class]] || operation.graph != self) {
      raise_invalid([NSString stringWithFormat:@"%s %@ is not an operation of this graph", method, operation]);
    }
    for (MPSGraphTensor* tensor in operation.outputTensors) targets.push_back([tensor shimkit_id]);
  }
  return targets;
}

- (MPSGraphTensorDataDictionary*)runWithFeeds:(MPSGraphTensorDataDictionary*)feeds
                                targetTensors:(NSArray<MPSGraphTensor*>*)targetTensors
                             targetOperations:(NSArray<MPSGraphOperation*>*)targetOperations {
  const char* method = "runWithFeeds:targetTensors:targetOperations:";
  id<MTLDevice> device = [MTLCreateSystemDefaultDevice() autorelease];
  NSMutableDictionary<MPSGraphTensor*, MPSGraphTensorData*>* results = [NSMutableDictionary dictionary];
  std::vector<Binding> outputs;
  for (MPSGraphTensor* tensor in targetTensors) {
    const mps::TensorInfo& info = _core->tensor([self idOf:tensor method:method]);
    const NSUInteger bytes = static_cast<NSUInteger>(mps::element_count(info.shape)) * mps::element_size(info.type);
    id<MTLBuffer> buffer = [[device newBufferWithLength:bytes options:MTLResourceStorageModeShared] autorelease];
    MPSGraphTensorData* data = [[[MPSGraphTensorData alloc] initWithMTLBuffer:buffer
                                                                         shape:shimkit_mps_shape(info.shape)
                                                                      dataType:info.type] autorelease];
    outputs.push_back([data shimkit_bindingFor:[tensor shimkit_id] of:*_core role:method]);
    results[tensor] = data;
  }
  std::vector<int> others = [self targetsOf:targetOperations method:method];
  std::vector<int> all = others;
  for (const Binding& output : outputs) all.push_back(output.tensor);
  const std::vector<Binding> inputs = [self bindFeeds:feeds method:method targets:all];
  shimkit_raising(method, [&] { run_graph(*_core, inputs, outputs, others); });
  return results;
}

- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(MPSGraphTensorDataDictionary*)feeds
             targetOperations:(NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(MPSGraphTensorDataDictionary*)resultsDictionary
          executionDescriptor:(MPSGraphExecutionDescriptor*)executionDescriptor {
  const char* method = "encodeToCommandBuffer:feeds:targetOperations:resultsDictionary:executionDescriptor:";
  if (![(id)commandBuffer respondsToSelector:@selector(shimkit_encodeCommand:retaining:)]) {
    raise_invalid([NSString stringWithFormat:@"%s %@ is not a command buffer of this Metal device", method,
                                             commandBuffer]);
  }
  NSMutableArray* buffers = [NSMutableArray array];
  std::vector<Binding> outputs;
  for (MPSGraphTensor* tensor in [resultsDictionary allKeys]) {
    const int id = [self idOf:tensor method:method];
    MPSGraphTensorData* data = [resultsDictionary objectForKey:tensor];
    NSString* role = [NSString stringWithFormat:@"%s the result for %@", method, [self describe:id]];
    outputs.push_back([data shimkit_bindingFor:id of:*_core role:[role UTF8String]]);
    [buffers addObject:[data shimkit_buffer]];
  }
  const std::vector<int> others = [self targetsOf:targetOperations method:method];
  std::vector<int> all = others;
  for (const Binding& output : outputs) all.push_back(output.tensor);
  const std::vector<Binding> inputs = [self bindFeeds:feeds method:method targets:all];
  for (MPSGraphTensor* tensor in [feeds allKeys]) [buffers addObject:[[feeds objectForKey:tensor] shimkit_buffer]];

  // What runs at commit holds a copy of the graph as it is now, the buffers (through the command buffer, as
  // Metal's resources are held) and, for the handler, the results dictionary; not the tensor data objects, which
  // the caller may release once this returns, as Apple's MPSGraph allows.
  std::shared_ptr<const mps::Graph> graph = std::make_shared<const mps::Graph>(*_core);
  std::shared_ptr<void> handler;
  std::shared_ptr<void> results;
  if (executionDescriptor.completionHandler) {
    handler.reset((void*)Block_copy(executionDescriptor.completionHandler), [](void* block) { Block_release(block); });
    results = keep_alive(resultsDictionary);
  }
  [(id<ShimkitCommandRecording>)commandBuffer
      shimkit_encodeCommand:[=] {
        shimkit_raising(method, [&] { run_graph(*graph, inputs, outputs, others); });
        if (handler) {
          ((MPSGraphExecutionCompletionHandler)handler.get())(
              (MPSGraphTensorDataDictionary*)results.get(), nil);
        }
      }
                  retaining:buffers];
}

// -- Operations --------------------------------------------------------------------------------------------------

- (MPSGraphTensor*)placeholderWithShape:(MPSShape*)shape dataType:(MPSDataType)dataType name:(NSString*)name {
  const char* method = "placeholderWithShape:dataType:name:";
  if (shape == nil) raise_invalid(@"placeholderWithShape:dataType:name: the stand-in takes no unranked (nil) shape");
  const std::vector<int64_t> sizes = shimkit_shape_of(shape, method);
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.placeholder(sizes, dataType); }];
}

- (MPSGraphTensor*)constantWithScalar:(double)scalar dataType:(MPSDataType)dataType {
  return [self recordTensor:"constantWithScalar:dataType:"
                       name:nil
                      build:[&](mps::Graph& g) { g.constant(scalar, {1}, dataType); }];
}

- (MPSGraphTensor*)constantWithScalar:(double)scalar shape:(MPSShape*)shape dataType:(MPSDataType)dataType {
  const char* method = "constantWithScalar:shape:dataType:";
  const std::vector<int64_t> sizes = shimkit_shape_of(shape, method);
  return [self recordTensor:method name:nil build:[&](mps::Graph& g) { g.constant(scalar, sizes, dataType); }];
}

- (MPSGraphTensor*)binary:(mps::Binary)kind
                  method:(const char*)method
                 primary:(MPSGraphTensor*)primary
               secondary:(MPSGraphTensor*)secondary
                    name:(NSString*)name {
  const int a = [self idOf:primary method:method], b = [self idOf:secondary method:method];
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.binary(kind, a, b); }];
}

- (MPSGraphTensor*)additionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(NSString*)name {
  return [self binary:mps::Binary::kAdd
               method:"additionWithPrimaryTensor:secondaryTensor:name:"
              primary:primaryTensor
            secondary:secondaryTensor
                 name:name];
}

- (MPSGraphTensor*)subtractionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                           name:(NSString*)name {
  return [self binary:mps::Binary::kSubtract
               method:"subtractionWithPrimaryTensor:secondaryTensor:name:"
              primary:primaryTensor
            secondary:secondaryTensor
                 name:name];
}

- (MPSGraphTensor*)multiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                   secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                              name:(NSString*)name {
  return [self binary:mps::Binary::kMultiply
               method:"multiplicationWithPrimaryTensor:secondaryTensor:name:"
              primary:primaryTensor
            secondary:secondaryTensor
                 name:name];
}

- (MPSGraphTensor*)divisionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(NSString*)name {
  return [self binary:mps::Binary::kDivide
               method:"divisionWithPrimaryTensor:secondaryTensor:name:"
              primary:primaryTensor
            secondary:secondaryTensor
                 name:name];
}

- (MPSGraphTensor*)negativeWithTensor:(MPSGraphTensor*)tensor name:(NSString*)name {
  const char* method = "negativeWithTensor:name:";
  const int input = [self idOf:tensor method:method];
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.negate(input); }];
}

- (MPSGraphTensor*)matrixMultiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                         secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                                    name:(NSString*)name {
  const char* method = "matrixMultiplicationWithPrimaryTensor:secondaryTensor:name:";
  const int a = [self idOf:primaryTensor method:method], b = [self idOf:secondaryTensor method:method];
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.matmul(a, b); }];
}

- (MPSGraphTensor*)reshapeTensor:(MPSGraphTensor*)tensor withShape:(MPSShape*)shape name:(NSString*)name {
  const char* method = "reshapeTensor:withShape:name:";
  const int input = [self idOf:tensor method:method];
  const std::vector<int64_t> sizes = shimkit_shape_of(shape, method);
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.reshape(input, sizes); }];
}

- (MPSGraphTensor*)transposeTensor:(MPSGraphTensor*)tensor
                         dimension:(NSUInteger)dimensionIndex
                     withDimension:(NSUInteger)dimensionIndex2
                              name:(NSString*)name {
  const char* method = "transposeTensor:dimension:withDimension:name:";
  const int input = [self idOf:tensor method:method];
  return [self recordTensor:method
                       name:name
                      build:[&](mps::Graph& g) {
                        // Apple declares the indices NSUInteger and reads them signed: -1 is the last dimension
                        // (upstream's op_mm.mm and PyTorch's MPS operations pass -2 and -1).
                        g.transpose(input, static_cast<int64_t>(dimensionIndex), static_cast<int64_t>(dimensionIndex2));
                      }];
}

- (MPSGraphTensor*)broadcastTensor:(MPSGraphTensor*)tensor toShape:(MPSShape*)shape name:(NSString*)name {
  const char* method = "broadcastTensor:toShape:name:";
  const int input = [self idOf:tensor method:method];
  const std::vector<int64_t> sizes = shimkit_shape_of(shape, method);
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.broadcast(input, sizes); }];
}

- (MPSGraphTensor*)castTensor:(MPSGraphTensor*)tensor toType:(MPSDataType)type name:(NSString*)name {
  const char* method = "castTensor:toType:name:";
  const int input = [self idOf:tensor method:method];
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.cast(input, type); }];
}

- (NSArray<MPSGraphTensor*>*)topKWithSourceTensor:(MPSGraphTensor*)source k:(NSUInteger)k name:(NSString*)name {
  const char* method = "topKWithSourceTensor:k:name:";
  const int input = [self idOf:source method:method];
  return [self record:method name:name build:[&](mps::Graph& g) { g.topk(input, static_cast<int64_t>(k)); }]
      .outputTensors;
}

- (MPSGraphTensor*)convolution2DWithSourceTensor:(MPSGraphTensor*)source
                                   weightsTensor:(MPSGraphTensor*)weights
                                      descriptor:(MPSGraphConvolution2DOpDescriptor*)descriptor
                                            name:(NSString*)name {
  const char* method = "convolution2DWithSourceTensor:weightsTensor:descriptor:name:";
  const int input = [self idOf:source method:method], kernel = [self idOf:weights method:method];
  if (descriptor == nil) raise_invalid(@"convolution2DWithSourceTensor: a nil descriptor");
  // NSUInteger fields read back as int64: a negative amount passed through them (upstream's transposed path does)
  // stays negative.
  mps::Conv2d conv;
  conv.stride_x = static_cast<int64_t>(descriptor.strideInX);
  conv.stride_y = static_cast<int64_t>(descriptor.strideInY);
  conv.dilation_x = static_cast<int64_t>(descriptor.dilationRateInX);
  conv.dilation_y = static_cast<int64_t>(descriptor.dilationRateInY);
  conv.groups = static_cast<int64_t>(descriptor.groups);
  conv.pad_left = static_cast<int64_t>(descriptor.paddingLeft);
  conv.pad_right = static_cast<int64_t>(descriptor.paddingRight);
  conv.pad_top = static_cast<int64_t>(descriptor.paddingTop);
  conv.pad_bottom = static_cast<int64_t>(descriptor.paddingBottom);
  conv.padding_style = descriptor.paddingStyle;
  conv.data_layout = descriptor.dataLayout;
  conv.weights_layout = descriptor.weightsLayout;
  return [self recordTensor:method name:name build:[&](mps::Graph& g) { g.conv2d(input, kernel, conv); }];
}

@end
