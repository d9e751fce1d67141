// Element types the kernels accept, and exact conversions of the 16-bit float formats.
//
// The enumerator values are c10::ScalarType's, because that is what aoti_torch_get_dtype returns in
// both libtorch and ExecuTorch; no torch header is needed to interpret them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shimkit/c10_codes.h"

namespace shimkit {

enum class DType : int32_t {
  kFloat16 = scalar_types::kFloat16,
  kFloat32 = scalar_types::kFloat32,
  kBFloat16 = scalar_types::kBFloat16,
};

// Maps an AOTI/c10 scalar-type code to a DType; false for types no kernel here supports.
bool dtype_from_scalar_type(int32_t code, DType* out);

// Name of a c10 scalar-type code ("float64", "int32" ...), for error messages about rejected types.
std::string scalar_type_name(int32_t code);

const char* dtype_name(DType dtype);
std::size_t element_size(DType dtype);

// The MSL scalar type that holds a c10 scalar-type code, as MSL kernels name their variants
// (sort_stable_half), or nullptr for a type no MSL kernel is instantiated for: the same nine as
// shimkit.metal.MSL_TYPES. Inline because the Metal adapters that use it are built without the SDK
// sources (Kernel(uses_sdk=False)).
inline const char* msl_type_name(int32_t scalar_type) {
  switch (scalar_type) {
    case scalar_types::kUInt8: return "uchar";
    case scalar_types::kInt8: return "char";
    case scalar_types::kInt16: return "short";
    case scalar_types::kInt32: return "int";
    case scalar_types::kInt64: return "long";
    case scalar_types::kFloat16: return "half";
    case scalar_types::kFloat32: return "float";
    case scalar_types::kBool: return "bool";
    case scalar_types::kBFloat16: return "bfloat";
    default: return nullptr;
  }
}

// Round-to-nearest-even, as torch converts; NaN stays NaN (quiet), overflow becomes inf.
uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(uint16_t bits);
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);

// Reads element `index` (in elements from `data`) of a buffer of `dtype` as float.
inline float load_float(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[index];
    case DType::kBFloat16:
      return bfloat16_bits_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::kFloat16:
      return half_bits_to_float(static_cast<const uint16_t*>(data)[index]);
  }
  return 0.0f;  // unreachable: DType values are only made by dtype_from_scalar_type
}

// Writes `value`, rounded to `dtype`, to element `index`.
inline void store_float(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[index] = value;
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[index] = float_to_bfloat16_bits(value);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(data)[index] = float_to_half_bits(value);
      return;
  }
}

}  // namespace shimkit
