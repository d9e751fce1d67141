// The c10 codes the AOTI C ABI passes as plain integers: scalar types (c10/core/ScalarType.h) and device
// types (c10/core/DeviceType.h). libtorch and ExecuTorch agree on them, so no torch header is needed.
// Dependency-free because everything reads them from here: the SDK, the Linux stand-in of the Metal
// runtime, the runtime adapters the plugins ship, and (through the runtime) shimkit.runtime.program.
#pragma once

#include <cstdint>

namespace shimkit {

namespace scalar_types {
constexpr int32_t kUInt8 = 0;
constexpr int32_t kInt8 = 1;
constexpr int32_t kInt16 = 2;
constexpr int32_t kInt32 = 3;
constexpr int32_t kInt64 = 4;
constexpr int32_t kFloat16 = 5;
constexpr int32_t kFloat32 = 6;
constexpr int32_t kFloat64 = 7;
constexpr int32_t kComplex64 = 9;
constexpr int32_t kComplex128 = 10;
constexpr int32_t kBool = 11;
constexpr int32_t kBFloat16 = 15;
}  // namespace scalar_types

namespace device_types {
constexpr int32_t kCpu = 0;
constexpr int32_t kCuda = 1;
constexpr int32_t kMps = 13;
constexpr int32_t kMeta = 14;
}  // namespace device_types

}  // namespace shimkit
