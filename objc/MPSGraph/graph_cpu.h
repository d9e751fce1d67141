// The CPU side of the stand-in's MPSGraph: a graph of operations over statically shaped tensors, built with its
// shapes checked as MPSGraph checks them, and evaluated on the CPU with the semantics MetalPerformanceShadersGraph.h
// states. Plain C++; every rejection is a std::invalid_argument whose message the Objective-C layer raises.
#pragma once

#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shimkit {
namespace mpsgraph {

using Shape = std::vector<int64_t>;

// The data types the stand-in computes in; others raise where they are met.
bool is_supported(MPSDataType type);
bool is_floating(MPSDataType type);
std::size_t element_size(MPSDataType type);  // throws for an unsupported type
std::string type_name(MPSDataType type);
std::string shape_text(const Shape& shape);
int64_t element_count(const Shape& shape);

// A tensor's value: floating types as float (each exactly representable in the type), integer and boolean types as
// int64 (each in the type's range; booleans 0 or 1). Dense, row-major.
struct Array {
  Shape shape;
  MPSDataType type = MPSDataTypeFloat32;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// From and to memory holding the type's own encoding, densely.
Array load_array(const void* bytes, const Shape& shape, MPSDataType type);
void store_array(const Array& array, void* bytes);

enum class Binary { kAdd, kSubtract, kMultiply, kDivide };

struct Conv2d {
  int64_t stride_x = 1, stride_y = 1, dilation_x = 1, dilation_y = 1, groups = 1;
  int64_t pad_left = 0, pad_right = 0, pad_top = 0, pad_bottom = 0;
  MPSGraphPaddingStyle padding_style = MPSGraphPaddingStyleExplicit;
  MPSGraphTensorNamedDataLayout data_layout = MPSGraphTensorNamedDataLayoutNCHW;
  MPSGraphTensorNamedDataLayout weights_layout = MPSGraphTensorNamedDataLayoutOIHW;
};

struct TensorInfo {
  Shape shape;
  MPSDataType type;
  int op;  // the operation that produces it
};

// Operations are appended and never change, so a copy of a graph evaluates as the graph did when copied.
class Graph {
 public:
  // Each returns the ids of the operation's output tensors (one, two for topK); the operation's id is ops() - 1.
  int placeholder(const Shape& shape, MPSDataType type);
  int constant(double value, const Shape& shape, MPSDataType type);
  int binary(Binary op, int lhs, int rhs);
  int negate(int input);
  int matmul(int lhs, int rhs);
  int transpose(int input, int64_t dim0, int64_t dim1);
  int broadcast(int input, const Shape& shape);
  int reshape(int input, const Shape& shape);
  int cast(int input, MPSDataType type);
  std::pair<int, int> topk(int input, int64_t k);
  int conv2d(int source, int weights, const Conv2d& params);

  const TensorInfo& tensor(int id) const { return tensors_.at(static_cast<std::size_t>(id)); }
  int ops() const { return static_cast<int>(ops_.size()); }
  bool is_placeholder(int tensor) const;
  const std::vector<int>& op_inputs(int op) const { return ops_.at(static_cast<std::size_t>(op)).inputs; }
  const std::vector<int>& op_outputs(int op) const { return ops_.at(static_cast<std::size_t>(op)).outputs; }

  // The placeholders the targets depend on, each once.
  std::vector<int> placeholders_needed(const std::vector<int>& targets) const;
  // The targets' values, from the placeholders' values in `feeds` (which must hold every one needed).
  std::vector<Array> evaluate(const std::vector<std::pair<int, Array>>& feeds, const std::vector<int>& targets) const;

 private:
  enum class Kind { kPlaceholder, kConstant, kBinary, kNegate, kMatmul, kTranspose, kBroadcast, kReshape, kCast,
                    kTopK, kConv2d };
  struct Op {
    explicit Op(Kind kind, std::vector<int> inputs = {}) : kind(kind), inputs(std::move(inputs)) {}
    Kind kind;
    std::vector<int> inputs;
    std::vector<int> outputs;
    double scalar = 0;    // kConstant
    Binary binary = Binary::kAdd;
    int64_t dim0 = 0, dim1 = 0;  // kTranspose
    int64_t k = 0;               // kTopK
    Conv2d conv;                 // with the padding resolved to explicit amounts
  };

  int add(Op op, std::vector<std::pair<Shape, MPSDataType>> outputs);
  void compute(const Op& op, std::vector<Array>& values, std::vector<bool>& known) const;

  std::vector<Op> ops_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace mpsgraph
}  // namespace shimkit
