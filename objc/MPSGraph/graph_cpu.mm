// The stand-in's MPSGraph evaluator (graph_cpu.h). Floating values are computed in float32 and rounded to their type
// after each operation; for float16 and bfloat16 that is the correctly rounded result of +, -, *, / (float32's 24 bits
// are at least twice their precision plus two, so rounding twice cannot differ from rounding once).
#include "graph_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace shimkit {
namespace mpsgraph {
namespace {

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// IEEE binary16, round to nearest even; a NaN keeps its sign and top payload bits, made quiet.
uint16_t float_to_half(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal (2^-14): a count of 2^-24 units. Scaling by 2^24 is exact, and rounding the count to
    // an integer is the subnormal's rounding; a count of 1024 is the smallest normal's encoding.
    const float units = std::nearbyint(bits_float(magnitude) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u) - 0x38000000u;  // rebias 127 -> 15
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// bfloat16, round to nearest even; a NaN keeps its sign and top payload bits, made quiet.
uint16_t float_to_bfloat16(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float bfloat16_to_float(uint16_t value) { return bits_float(static_cast<uint32_t>(value) << 16); }

// `value` rounded to the floating type.
float round_to(MPSDataType type, float value) {
  switch (type) {
    case MPSDataTypeFloat16:
      return half_to_float(float_to_half(value));
    case MPSDataTypeBFloat16:
      return bfloat16_to_float(float_to_bfloat16(value));
    default:
      return value;
  }
}

// A double rounded once to the floating type: to float32 by rounding to odd first, which makes the second rounding
// (to a 16-bit type, far fewer bits) the correct one.
float round_double_to(MPSDataType type, double value) {
  float rounded = static_cast<float>(value);
  if (type == MPSDataTypeFloat32 || std::isnan(value) || static_cast<double>(rounded) == value) {
    return round_to(type, rounded);
  }
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) rounded = std::nextafter(rounded, 0.0f);
  return round_to(type, bits_float(float_bits(rounded) | 1u));
}

struct IntRange {
  int64_t min, max;
};

IntRange int_range(MPSDataType type) {
  switch (type) {
    case MPSDataTypeInt8:
      return {INT8_MIN, INT8_MAX};
    case MPSDataTypeInt16:
      return {INT16_MIN, INT16_MAX};
    case MPSDataTypeInt32:
      return {INT32_MIN, INT32_MAX};
    case MPSDataTypeUInt8:
      return {0, UINT8_MAX};
    case MPSDataTypeUInt16:
      return {0, UINT16_MAX};
    case MPSDataTypeUInt32:
      return {0, UINT32_MAX};
    case MPSDataTypeBool:
      return {0, 1};
    default:
      return {INT64_MIN, INT64_MAX};
  }
}

// An int64 wrapped into the integer type's range, as its two's complement bits are; booleans are 0 or 1.
int64_t wrap_to(MPSDataType type, int64_t value) {
  switch (type) {
    case MPSDataTypeInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(value));
    case MPSDataTypeInt16:
      return static_cast<int16_t>(static_cast<uint16_t>(value));
    case MPSDataTypeInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(value));
    case MPSDataTypeUInt8:
      return static_cast<uint8_t>(value);
    case MPSDataTypeUInt16:
      return static_cast<uint16_t>(value);
    case MPSDataTypeUInt32:
      return static_cast<uint32_t>(value);
    case MPSDataTypeBool:
      return value != 0;
    default:
      return value;
  }
}

// A floating value toward zero into the integer type, saturating; NaN gives 0; booleans are value != 0.
int64_t truncate_to(MPSDataType type, double value) {
  if (type == MPSDataTypeBool) return value != 0;
  if (std::isnan(value)) return 0;
  const IntRange range = int_range(type);
  const double truncated = std::trunc(value);
  // INT64_MAX converts to 2^63, the first double past it; every smaller double fits.
  if (truncated >= static_cast<double>(range.max)) return range.max;
  if (truncated <= static_cast<double>(range.min)) return range.min;
  return static_cast<int64_t>(truncated);
}

Array empty_like(const Shape& shape, MPSDataType type) {
  Array array;
  array.shape = shape;
  array.type = type;
  const std::size_t count = static_cast<std::size_t>(element_count(shape));
  if (is_floating(type)) {
    array.floats.assign(count, 0.0f);
  } else {
    array.ints.assign(count, 0);
  }
  return array;
}

// Row-major strides of a dense shape, in elements.
std::vector<int64_t> dense_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// The strides that read a dense `input` at the (NumPy-broadcast) shape `output`: 0 along broadcast dimensions.
std::vector<int64_t> broadcast_strides(const Shape& input, const Shape& output) {
  const std::vector<int64_t> dense = dense_strides(input);
  std::vector<int64_t> strides(output.size(), 0);
  const std::size_t lead = output.size() - input.size();
  for (std::size_t d = 0; d < input.size(); ++d) strides[lead + d] = input[d] == 1 ? 0 : dense[d];
  return strides;
}

// A dense array of `shape` whose element at index i is input's at sum(i_d * strides_d).
Array gather(const Array& input, const Shape& shape, const std::vector<int64_t>& strides) {
  Array output = empty_like(shape, input.type);
  const int64_t count = element_count(shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t source = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (is_floating(input.type)) {
      output.floats[static_cast<std::size_t>(i)] = input.floats[static_cast<std::size_t>(source)];
    } else {
      output.ints[static_cast<std::size_t>(i)] = input.ints[static_cast<std::size_t>(source)];
    }
    for (std::size_t d = shape.size(); d-- > 0;) {
      source += strides[d];
      if (++index[d] < shape[d]) break;
      source -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
  return output;
}

Array permute(const Array& input, const std::vector<std::size_t>& order) {
  const std::vector<int64_t> dense = dense_strides(input.shape);
  Shape shape;
  std::vector<int64_t> strides;
  for (std::size_t d : order) {
    shape.push_back(input.shape[d]);
    strides.push_back(dense[d]);
  }
  return gather(input, shape, strides);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  Shape shape(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) {
      fail(std::string(what) + ": shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    }
    shape[shape.size() - 1 - i] = x == 1 ? y : x;
  }
  return shape;
}

void require_same_type(MPSDataType a, MPSDataType b, const char* what) {
  if (a != b) fail(std::string(what) + ": data types " + type_name(a) + " and " + type_name(b) + " differ");
}

void require_floating(MPSDataType type, const char* what) {
  if (!is_floating(type)) fail(std::string(what) + ": " + type_name(type) + " is not a floating type");
}

int64_t checked_dimension(int64_t dim, std::size_t rank, const char* what) {
  if (dim < 0 || static_cast<std::size_t>(dim) >= rank) {
    fail(std::string(what) + ": dimension " + std::to_string(dim) + " of a rank-" + std::to_string(rank) +
         " tensor");
  }
  return dim;
}

// MPSGraph's topK order (graph_cpu.h's header states the assumption): 1 for a NaN with the sign bit clear, -1 for
// one with it set, 0 for a number.
int nan_tier(float value) { return std::isnan(value) ? (std::signbit(value) ? -1 : 1) : 0; }

bool ranks_above(float a, float b) {
  const int tier_a = nan_tier(a), tier_b = nan_tier(b);
  if (tier_a != tier_b) return tier_a > tier_b;
  return tier_a == 0 && a > b;
}

// Before, after: the padding that makes a SAME output of ceil(in / stride) elements, as TensorFlow (extra after) or
// ONNX's SAME_LOWER (extra before) places it.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, bool lower) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + (kernel - 1) * dilation + 1 - in, 0);
  const int64_t small = total / 2;
  return lower ? std::make_pair(total - small, small) : std::make_pair(small, total - small);
}

int64_t conv_output(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t before, int64_t after) {
  const int64_t span = in + before + after - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace

bool is_supported(MPSDataType type) {
  switch (type) {
    case MPSDataTypeFloat32:
    case MPSDataTypeFloat16:
    case MPSDataTypeBFloat16:
    case MPSDataTypeInt8:
    case MPSDataTypeInt16:
    case MPSDataTypeInt32:
    case MPSDataTypeInt64:
    case MPSDataTypeUInt8:
    case MPSDataTypeUInt16:
    case MPSDataTypeUInt32:
    case MPSDataTypeBool:
      return true;
    default:
      return false;
  }
}

bool is_floating(MPSDataType type) {
  return type == MPSDataTypeFloat32 || type == MPSDataTypeFloat16 || type == MPSDataTypeBFloat16;
}

std::size_t element_size(MPSDataType type) {
  if (!is_supported(type)) fail("data type " + type_name(type) + " is not supported by the stand-in");
  return type == MPSDataTypeBool ? 1 : (type & 0xffffu) / 8;
}

std::string type_name(MPSDataType type) {
  switch (type) {
    case MPSDataTypeFloat32:
      return "float32";
    case MPSDataTypeFloat16:
      return "float16";
    case MPSDataTypeBFloat16:
      return "bfloat16";
    case MPSDataTypeInt8:
      return "int8";
    case MPSDataTypeInt16:
      return "int16";
    case MPSDataTypeInt32:
      return "int32";
    case MPSDataTypeInt64:
      return "int64";
    case MPSDataTypeUInt8:
      return "uint8";
    case MPSDataTypeUInt16:
      return "uint16";
    case MPSDataTypeUInt32:
      return "uint32";
    case MPSDataTypeBool:
      return "bool";
    default: {
      char text[32];
      std::snprintf(text, sizeof text, "MPSDataType 0x%x", static_cast<unsigned>(type));
      return text;
    }
  }
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

int64_t element_count(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

Array load_array(const void* bytes, const Shape& shape, MPSDataType type) {
  element_size(type);
  Array array = empty_like(shape, type);
  const std::size_t count = static_cast<std::size_t>(element_count(shape));
  for (std::size_t i = 0; i < count; ++i) {
    switch (type) {
      case MPSDataTypeFloat32:
        array.floats[i] = static_cast<const float*>(bytes)[i];
        break;
      case MPSDataTypeFloat16:
        array.floats[i] = half_to_float(static_cast<const uint16_t*>(bytes)[i]);
        break;
      case MPSDataTypeBFloat16:
        array.floats[i] = bfloat16_to_float(static_cast<const uint16_t*>(bytes)[i]);
        break;
      case MPSDataTypeInt8:
        array.ints[i] = static_cast<const int8_t*>(bytes)[i];
        break;
      case MPSDataTypeInt16:
        array.ints[i] = static_cast<const int16_t*>(bytes)[i];
        break;
      case MPSDataTypeInt32:
        array.ints[i] = static_cast<const int32_t*>(bytes)[i];
        break;
      case MPSDataTypeInt64:
        array.ints[i] = static_cast<const int64_t*>(bytes)[i];
        break;
      case MPSDataTypeUInt8:
        array.ints[i] = static_cast<const uint8_t*>(bytes)[i];
        break;
      case MPSDataTypeUInt16:
        array.ints[i] = static_cast<const uint16_t*>(bytes)[i];
        break;
      case MPSDataTypeUInt32:
        array.ints[i] = static_cast<const uint32_t*>(bytes)[i];
        break;
      default:  // MPSDataTypeBool: any nonzero byte is true
        array.ints[i] = static_cast<const uint8_t*>(bytes)[i] != 0;
        break;
    }
  }
  return array;
}

void store_array(const Array& array, void* bytes) {
  const std::size_t count = static_cast<std::size_t>(element_count(array.shape));
  for (std::size_t i = 0; i < count; ++i) {
    switch (array.type) {
      case MPSDataTypeFloat32:
        static_cast<float*>(bytes)[i] = array.floats[i];
        break;
      case MPSDataTypeFloat16:
        static_cast<uint16_t*>(bytes)[i] = float_to_half(array.floats[i]);
        break;
      case MPSDataTypeBFloat16:
        static_cast<uint16_t*>(bytes)[i] = float_to_bfloat16(array.floats[i]);
        break;
      case MPSDataTypeInt8:
        static_cast<int8_t*>(bytes)[i] = static_cast<int8_t>(array.ints[i]);
        break;
      case MPSDataTypeInt16:
        static_cast<int16_t*>(bytes)[i] = static_cast<int16_t>(array.ints[i]);
        break;
      case MPSDataTypeInt32:
        static_cast<int32_t*>(bytes)[i] = static_cast<int32_t>(array.ints[i]);
        break;
      case MPSDataTypeInt64:
        static_cast<int64_t*>(bytes)[i] = array.ints[i];
        break;
      case MPSDataTypeUInt8:
      case MPSDataTypeBool:
        static_cast<uint8_t*>(bytes)[i] = static_cast<uint8_t>(array.ints[i]);
        break;
      case MPSDataTypeUInt16:
        static_cast<uint16_t*>(bytes)[i] = static_cast<uint16_t>(array.ints[i]);
        break;
      default:  // MPSDataTypeUInt32
        static_cast<uint32_t*>(bytes)[i] = static_cast<uint32_t>(array.ints[i]);
        break;
    }
  }
}

// -- Building --------------------------------------------------------------------------------------------------

int Graph::add(Op op, std::vector<std::pair<Shape, MPSDataType>> outputs) {
  const int index = static_cast<int>(ops_.size());
  for (auto& output : outputs) {
    op.outputs.push_back(static_cast<int>(tensors_.size()));
    tensors_.push_back({std::move(output.first), output.second, index});
  }
  ops_.push_back(std::move(op));
  return ops_.back().outputs.front();
}

bool Graph::is_placeholder(int tensor) const {
  return ops_.at(static_cast<std::size_t>(this->tensor(tensor).op)).kind == Kind::kPlaceholder;
}

int Graph::placeholder(const Shape& shape, MPSDataType type) {
  element_size(type);
  for (int64_t size : shape) {
    if (size < 0) fail("shape " + shape_text(shape) + ": the stand-in takes static, non-negative sizes only");
  }
  return add(Op(Kind::kPlaceholder), {{shape, type}});
}

int Graph::constant(double value, const Shape& shape, MPSDataType type) {
  element_size(type);
  for (int64_t size : shape) {
    if (size < 0) fail("shape " + shape_text(shape) + " has a negative size");
  }
  Op op(Kind::kConstant);
  op.scalar = value;
  return add(op, {{shape, type}});
}

int Graph::binary(Binary kind, int lhs, int rhs) {
  const TensorInfo& a = tensor(lhs);
  const TensorInfo& b = tensor(rhs);
  require_same_type(a.type, b.type, "the operands");
  if (a.type == MPSDataTypeBool) fail("arithmetic on bool tensors is not supported by the stand-in");
  if (kind == Binary::kDivide && !is_floating(a.type)) {
    fail("integer division is not supported by the stand-in (MPSGraph does not document its rounding)");
  }
  Op op(Kind::kBinary, {lhs, rhs});
  op.binary = kind;
  return add(op, {{broadcast_shapes(a.shape, b.shape, "the operands"), a.type}});
}

int Graph::negate(int input) {
  const TensorInfo& a = tensor(input);
  if (a.type == MPSDataTypeBool) fail("negating a bool tensor is not supported by the stand-in");
  return add(Op(Kind::kNegate, {input}), {{a.shape, a.type}});
}

int Graph::matmul(int lhs, int rhs) {
  const TensorInfo& a = tensor(lhs);
  const TensorInfo& b = tensor(rhs);
  require_same_type(a.type, b.type, "the operands");
  require_floating(a.type, "the operands");
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    fail("operands of shapes " + shape_text(a.shape) + " and " + shape_text(b.shape) +
         ": the stand-in multiplies tensors of rank 2 or more");
  }
  const int64_t k = a.shape[a.shape.size() - 1];
  if (b.shape[b.shape.size() - 2] != k) {
    fail("shapes " + shape_text(a.shape) + " and " + shape_text(b.shape) + " cannot be multiplied (" +
         std::to_string(k) + " columns against " + std::to_string(b.shape[b.shape.size() - 2]) + " rows)");
  }
  Shape shape = broadcast_shapes(Shape(a.shape.begin(), a.shape.end() - 2), Shape(b.shape.begin(), b.shape.end() - 2),
                                 "the batch dimensions");
  shape.push_back(a.shape[a.shape.size() - 2]);
  shape.push_back(b.shape.back());
  return add(Op(Kind::kMatmul, {lhs, rhs}), {{shape, a.type}});
}

int Graph::transpose(int input, int64_t dim0, int64_t dim1) {
  const TensorInfo& a = tensor(input);
  Op op(Kind::kTranspose, {input});
  // A negative dimension counts from the end.
  const auto rank = static_cast<int64_t>(a.shape.size());
  op.dim0 = checked_dimension(dim0 < 0 ? dim0 + rank : dim0, a.shape.size(), "transpose");
  op.dim1 = checked_dimension(dim1 < 0 ? dim1 + rank : dim1, a.shape.size(), "transpose");
  Shape shape = a.shape;
  std::swap(shape[static_cast<std::size_t>(op.dim0)], shape[static_cast<std::size_t>(op.dim1)]);
  return add(op, {{shape, a.type}});
}

int Graph::broadcast(int input, const Shape& shape) {
  const TensorInfo& a = tensor(input);
  if (shape.size() < a.shape.size() || broadcast_shapes(a.shape, shape, "broadcast") != shape) {
    fail("a tensor of shape " + shape_text(a.shape) + " cannot be broadcast to " + shape_text(shape));
  }
  return add(Op(Kind::kBroadcast, {input}), {{shape, a.type}});
}

int Graph::reshape(int input, const Shape& requested) {
  const TensorInfo& a = tensor(input);
  Shape shape = requested;
  const auto inferred = std::find(shape.begin(), shape.end(), -1);
  if (inferred != shape.end()) {
    *inferred = 1;
    const int64_t rest = element_count(shape);
    if (std::find(inferred + 1, shape.end(), -1) != shape.end() || rest == 0 || element_count(a.shape) % rest != 0) {
      fail("a tensor of shape " + shape_text(a.shape) + " cannot be reshaped to " + shape_text(requested));
    }
    *inferred = element_count(a.shape) / rest;
  }
  for (int64_t size : shape) {
    if (size < 0) fail("shape " + shape_text(requested) + " has a negative size");
  }
  if (element_count(shape) != element_count(a.shape)) {
    fail("a tensor of shape " + shape_text(a.shape) + " (" + std::to_string(element_count(a.shape)) +
         " elements) cannot be reshaped to " + shape_text(requested));
  }
  return add(Op(Kind::kReshape, {input}), {{shape, a.type}});
}

int Graph::cast(int input, MPSDataType type) {
  element_size(type);
  return add(Op(Kind::kCast, {input}), {{tensor(input).shape, type}});
}

std::pair<int, int> Graph::topk(int input, int64_t k) {
  const TensorInfo& a = tensor(input);
  if (a.shape.empty()) fail("topK of a rank-0 tensor");
  if (a.type == MPSDataTypeBool) fail("topK of a bool tensor is not supported by the stand-in");
  if (k < 0 || k > a.shape.back()) {
    fail("k = " + std::to_string(k) + " for a last dimension of " + std::to_string(a.shape.back()) + " elements");
  }
  Shape shape = a.shape;
  shape.back() = k;
  Op op(Kind::kTopK, {input});
  op.k = k;
  const int values = add(op, {{shape, a.type}, {shape, MPSDataTypeInt32}});
  return {values, values + 1};
}

int Graph::conv2d(int source, int weights, const Conv2d& requested) {
  const TensorInfo& in = tensor(source);
  const TensorInfo& w = tensor(weights);
  require_same_type(in.type, w.type, "the source and weights");
  require_floating(in.type, "the source");
  const bool nhwc = requested.data_layout == MPSGraphTensorNamedDataLayoutNHWC;
  const bool hwio = requested.weights_layout == MPSGraphTensorNamedDataLayoutHWIO;
  if (!nhwc && requested.data_layout != MPSGraphTensorNamedDataLayoutNCHW) {
    fail("data layout " + std::to_string(requested.data_layout) + ": the stand-in takes NCHW and NHWC");
  }
  if (!hwio && requested.weights_layout != MPSGraphTensorNamedDataLayoutOIHW) {
    fail("weights layout " + std::to_string(requested.weights_layout) + ": the stand-in takes OIHW and HWIO");
  }
  if (in.shape.size() != 4 || w.shape.size() != 4) {
    fail("source " + shape_text(in.shape) + " and weights " + shape_text(w.shape) + " must both be of rank 4");
  }
  const int64_t batch = in.shape[0], channels = in.shape[nhwc ? 3 : 1];
  const int64_t height = in.shape[nhwc ? 1 : 2], width = in.shape[nhwc ? 2 : 3];
  const int64_t outputs = w.shape[hwio ? 3 : 0], per_group = w.shape[hwio ? 2 : 1];
  const int64_t kernel_h = w.shape[hwio ? 0 : 2], kernel_w = w.shape[hwio ? 1 : 3];
  Conv2d conv = requested;
  if (conv.groups < 1 || conv.stride_x < 1 || conv.stride_y < 1 || conv.dilation_x < 1 || conv.dilation_y < 1) {
    fail("groups, strides and dilation rates must be at least 1");
  }
  if (per_group * conv.groups != channels || outputs % conv.groups != 0) {
    fail("weights " + shape_text(w.shape) + " with " + std::to_string(conv.groups) + " groups do not fit a source of " +
         std::to_string(channels) + " channels");
  }
  switch (conv.padding_style) {
    case MPSGraphPaddingStyleExplicit:
      break;
    case MPSGraphPaddingStyleTF_VALID:
      conv.pad_left = conv.pad_right = conv.pad_top = conv.pad_bottom = 0;
      break;
    case MPSGraphPaddingStyleTF_SAME:
    case MPSGraphPaddingStyleONNX_SAME_LOWER: {
      const bool lower = conv.padding_style == MPSGraphPaddingStyleONNX_SAME_LOWER;
      std::tie(conv.pad_top, conv.pad_bottom) = same_padding(height, kernel_h, conv.stride_y, conv.dilation_y, lower);
      std::tie(conv.pad_left, conv.pad_right) = same_padding(width, kernel_w, conv.stride_x, conv.dilation_x, lower);
      break;
    }
    default:
      fail("padding style " + std::to_string(conv.padding_style) + " is not supported by the stand-in");
  }
  conv.padding_style = MPSGraphPaddingStyleExplicit;
  const int64_t out_h = conv_output(height, kernel_h, conv.stride_y, conv.dilation_y, conv.pad_top, conv.pad_bottom);
  const int64_t out_w = conv_output(width, kernel_w, conv.stride_x, conv.dilation_x, conv.pad_left, conv.pad_right);
  if (out_h < 1 || out_w < 1) {
    fail("the kernel " + shape_text({kernel_h, kernel_w}) + " (dilated) does not fit the padded source " +
         shape_text({height, width}));
  }
  Op op(Kind::kConv2d, {source, weights});
  op.conv = conv;
  const Shape shape = nhwc ? Shape{batch, out_h, out_w, outputs} : Shape{batch, outputs, out_h, out_w};
  return add(op, {{shape, in.type}});
}

// -- Evaluating ------------------------------------------------------------------------------------------------

std::vector<int> Graph::placeholders_needed(const std::vector<int>& targets) const {
  std::vector<bool> seen(tensors_.size(), false);
  std::vector<int> pending(targets), needed;
  while (!pending.empty()) {
    const int id = pending.back();
    pending.pop_back();
    if (seen.at(static_cast<std::size_t>(id))) continue;
    seen[static_cast<std::size_t>(id)] = true;
    const Op& op = ops_[static_cast<std::size_t>(tensor(id).op)];
    if (op.kind == Kind::kPlaceholder) needed.push_back(id);
    pending.insert(pending.end(), op.inputs.begin(), op.inputs.end());
  }
  return needed;
}

std::vector<Array> Graph::evaluate(const std::vector<std::pair<int, Array>>& feeds,
                                   const std::vector<int>& targets) const {
  std::vector<Array> values(tensors_.size());
  std::vector<bool> known(tensors_.size(), false);
  for (const auto& feed : feeds) {
    values.at(static_cast<std::size_t>(feed.first)) = feed.second;
    known[static_cast<std::size_t>(feed.first)] = true;
  }
  // Operations are appended after their inputs, so one pass in order over those needed evaluates each once.
  std::vector<bool> needed(ops_.size(), false);
  std::vector<int> pending(targets);
  while (!pending.empty()) {
    const int id = pending.back();
    pending.pop_back();
    const std::size_t op = static_cast<std::size_t>(tensor(id).op);
    if (known[static_cast<std::size_t>(id)] || needed[op]) continue;
    needed[op] = true;
    pending.insert(pending.end(), ops_[op].inputs.begin(), ops_[op].inputs.end());
  }
  for (std::size_t op = 0; op < ops_.size(); ++op) {
    if (needed[op]) compute(ops_[op], values, known);
  }
  std::vector<Array> results;
  for (int id : targets) results.push_back(values[static_cast<std::size_t>(id)]);
  return results;
}

void Graph::compute(const Op& op, std::vector<Array>& values, std::vector<bool>& known) const {
  const TensorInfo& out_info = tensor(op.outputs.front());
  Array& out = values[static_cast<std::size_t>(op.outputs.front())];
  auto input = [&](std::size_t i) -> const Array& { return values[static_cast<std::size_t>(op.inputs.at(i))]; };
  const bool floating = is_floating(out_info.type);

  switch (op.kind) {
    case Kind::kPlaceholder:
      fail("a placeholder the targets need was not fed");
    case Kind::kConstant:
      out = empty_like(out_info.shape, out_info.type);
      if (floating) {
        std::fill(out.floats.begin(), out.floats.end(), round_double_to(out_info.type, op.scalar));
      } else {
        std::fill(out.ints.begin(), out.ints.end(), truncate_to(out_info.type, op.scalar));
      }
      break;
    case Kind::kBinary: {
      const Array a = gather(input(0), out_info.shape, broadcast_strides(input(0).shape, out_info.shape));
      const Array b = gather(input(1), out_info.shape, broadcast_strides(input(1).shape, out_info.shape));
      out = empty_like(out_info.shape, out_info.type);
      if (floating) {
        for (std::size_t i = 0; i < out.floats.size(); ++i) {
          const float x = a.floats[i], y = b.floats[i];
          float r = 0;
          switch (op.binary) {
            case Binary::kAdd: r = x + y; break;
            case Binary::kSubtract: r = x - y; break;
            case Binary::kMultiply: r = x * y; break;
            case Binary::kDivide: r = x / y; break;
          }
          out.floats[i] = round_to(out_info.type, r);
        }
      } else {
        for (std::size_t i = 0; i < out.ints.size(); ++i) {
          // Unsigned arithmetic wraps where signed overflow would be undefined.
          const uint64_t x = static_cast<uint64_t>(a.ints[i]), y = static_cast<uint64_t>(b.ints[i]);
          const uint64_t r = op.binary == Binary::kAdd ? x + y : op.binary == Binary::kSubtract ? x - y : x * y;
          out.ints[i] = wrap_to(out_info.type, static_cast<int64_t>(r));
        }
      }
      break;
    }
    case Kind::kNegate:
      out = input(0);
      for (float& x : out.floats) x = -x;
      for (int64_t& x : out.ints) x = wrap_to(out_info.type, static_cast<int64_t>(0 - static_cast<uint64_t>(x)));
      break;
    case Kind::kMatmul: {
      const Shape& a_shape = input(0).shape;
      const Shape& b_shape = input(1).shape;
      const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
      Shape batch(out_info.shape.begin(), out_info.shape.end() - 2);
      Shape a_full = batch, b_full = batch;
      a_full.insert(a_full.end(), {m, k});
      b_full.insert(b_full.end(), {k, n});
      const Array a = gather(input(0), a_full, broadcast_strides(a_shape, a_full));
      const Array b = gather(input(1), b_full, broadcast_strides(b_shape, b_full));
      out = empty_like(out_info.shape, out_info.type);
      const int64_t batches = element_count(batch);
      for (int64_t s = 0; s < batches; ++s) {
        const float* lhs = a.floats.data() + s * m * k;
        const float* rhs = b.floats.data() + s * k * n;
        float* result = out.floats.data() + s * m * n;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int64_t p = 0; p < k; ++p) {
              const float product = lhs[i * k + p] * rhs[p * n + j];  // its own statement: never fused into an FMA
              sum += product;
            }
            result[i * n + j] = round_to(out_info.type, sum);
          }
        }
      }
      break;
    }
    case Kind::kTranspose: {
      std::vector<std::size_t> order(out_info.shape.size());
      std::iota(order.begin(), order.end(), 0);
      std::swap(order[static_cast<std::size_t>(op.dim0)], order[static_cast<std::size_t>(op.dim1)]);
      out = permute(input(0), order);
      break;
    }
    case Kind::kBroadcast:
      out = gather(input(0), out_info.shape, broadcast_strides(input(0).shape, out_info.shape));
      break;
    case Kind::kReshape:
      out = input(0);
      out.shape = out_info.shape;
      break;
    case Kind::kCast: {
      const Array& a = input(0);
      out = empty_like(out_info.shape, out_info.type);
      const std::size_t count = static_cast<std::size_t>(element_count(out_info.shape));
      for (std::size_t i = 0; i < count; ++i) {
        if (is_floating(a.type) && floating) {
          out.floats[i] = round_to(out_info.type, a.floats[i]);
        } else if (is_floating(a.type)) {
          out.ints[i] = truncate_to(out_info.type, a.floats[i]);
        } else if (floating) {
          out.floats[i] = round_to(out_info.type, static_cast<float>(a.ints[i]));
        } else {
          out.ints[i] = wrap_to(out_info.type, a.ints[i]);
        }
      }
      break;
    }
    case Kind::kTopK: {
      const Array& a = input(0);
      const int64_t length = a.shape.back(), rows = length == 0 ? 0 : element_count(a.shape) / length;
      Array& indices = values[static_cast<std::size_t>(op.outputs[1])];
      out = empty_like(out_info.shape, out_info.type);
      indices = empty_like(out_info.shape, MPSDataTypeInt32);
      std::vector<int64_t> order(static_cast<std::size_t>(length));
      for (int64_t r = 0; r < rows; ++r) {
        std::iota(order.begin(), order.end(), 0);
        const std::size_t base = static_cast<std::size_t>(r * length);
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return floating ? ranks_above(a.floats[base + static_cast<std::size_t>(x)],
                                        a.floats[base + static_cast<std::size_t>(y)])
                          : a.ints[base + static_cast<std::size_t>(x)] > a.ints[base + static_cast<std::size_t>(y)];
        });
        for (int64_t j = 0; j < op.k; ++j) {
          const std::size_t from = base + static_cast<std::size_t>(order[static_cast<std::size_t>(j)]);
          const std::size_t to = static_cast<std::size_t>(r * op.k + j);
          if (floating) {
            out.floats[to] = a.floats[from];
          } else {
            out.ints[to] = a.ints[from];
          }
          indices.ints[to] = order[static_cast<std::size_t>(j)];
        }
      }
      known[static_cast<std::size_t>(op.outputs[1])] = true;
      break;
    }
    case Kind::kConv2d: {
      const Conv2d& c = op.conv;
      const bool nhwc = c.data_layout == MPSGraphTensorNamedDataLayoutNHWC;
      const Array source = nhwc ? permute(input(0), {0, 3, 1, 2}) : input(0);
      const Array weights =
          c.weights_layout == MPSGraphTensorNamedDataLayoutHWIO ? permute(input(1), {3, 2, 0, 1}) : input(1);
      const int64_t batch = source.shape[0], channels = source.shape[1], height = source.shape[2],
                    width = source.shape[3];
      const int64_t outputs = weights.shape[0], per_group = weights.shape[1], kernel_h = weights.shape[2],
                    kernel_w = weights.shape[3];
      const int64_t out_h = out_info.shape[nhwc ? 1 : 2], out_w = out_info.shape[nhwc ? 2 : 3];
      const int64_t outputs_per_group = outputs / c.groups;
      Array result = empty_like({batch, outputs, out_h, out_w}, out_info.type);
      for (int64_t nb = 0; nb < batch; ++nb) {
        for (int64_t o = 0; o < outputs; ++o) {
          const int64_t first_channel = (o / outputs_per_group) * per_group;
          for (int64_t y = 0; y < out_h; ++y) {
            for (int64_t x = 0; x < out_w; ++x) {
              float sum = 0.0f;
              for (int64_t ic = 0; ic < per_group; ++ic) {
                for (int64_t ky = 0; ky < kernel_h; ++ky) {
                  const int64_t sy = y * c.stride_y - c.pad_top + ky * c.dilation_y;
                  if (sy < 0 || sy >= height) continue;
                  for (int64_t kx = 0; kx < kernel_w; ++kx) {
                    const int64_t sx = x * c.stride_x - c.pad_left + kx * c.dilation_x;
                    if (sx < 0 || sx >= width) continue;
                    const float product =
                        source.floats[static_cast<std::size_t>(((nb * channels + first_channel + ic) * height + sy) *
                                                                   width +
                                                               sx)] *
                        weights.floats[static_cast<std::size_t>(((o * per_group + ic) * kernel_h + ky) * kernel_w + kx)];
                    sum += product;
                  }
                }
              }
              result.floats[static_cast<std::size_t>(((nb * outputs + o) * out_h + y) * out_w + x)] =
                  round_to(out_info.type, sum);
            }
          }
        }
      }
      out = nhwc ? permute(result, {0, 2, 3, 1}) : result;
      break;
    }
  }
  known[static_cast<std::size_t>(op.outputs.front())] = true;
}

}  // namespace mpsgraph
}  // namespace shimkit
