#include "shimkit/dtype.h"

#include <cstring>

namespace shimkit {

bool dtype_from_scalar_type(int32_t code, DType* out) {
  switch (code) {
    case static_cast<int32_t>(DType::kFloat16):
    case static_cast<int32_t>(DType::kFloat32):
    case static_cast<int32_t>(DType::kBFloat16):
      *out = static_cast<DType>(code);
      return true;
    default:
      return false;
  }
}

std::string scalar_type_name(int32_t code) {
  // c10::ScalarType order; only used to make rejection messages readable.
  static const char* const kNames[] = {
      "uint8",     "int8",       "int16",      "int32",   "int64",   "float16", "float32",
      "float64",   "complex32",  "complex64",  "complex128", "bool",  "qint8",   "quint8",
      "qint32",    "bfloat16"};
  if (code >= 0 && code < static_cast<int32_t>(sizeof(kNames) / sizeof(kNames[0]))) {
    return kNames[code];
  }
  return "scalar type " + std::to_string(code);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "float16";
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

std::size_t element_size(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}

namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

uint16_t float_to_bfloat16_bits(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // Keep the sign and force a quiet NaN: truncating could turn a NaN with low payload into inf.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bfloat16_bits_to_float(uint16_t bits) {
  return bits_float(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_half_bits(float value) {
  uint32_t bits = float_bits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero. Scale so the result's unit is
    // 2^-24 and let float addition do the round-to-nearest-even.
    float scaled = bits_float(abs) + 0.5f;  // 0.5 = 2^-1; its ulp is 2^-24 at this magnitude
    return static_cast<uint16_t>(sign | (float_bits(scaled) - float_bits(0.5f)));
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float half_bits_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24 is exact in float.
    float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace shimkit
