// How the runtime's C functions fail: no exception crosses the C ABI. A failure is recorded as the
// thread's last error ("<function>: <message>", read by shimkit_runtime_last_error()) and returned as
// ExecuTorch's error code, which AOTInductor's wrapper turns into an exception naming the call.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace shimkit {
namespace metal_runtime {

void set_last_error(std::string message);

// An error code that converts to int32_t (torch's AOTITorchError) and to ExecuTorch's Error enum.
struct ErrorCode {
  int32_t value;
  operator int32_t() const { return value; }
  template <class Enum, class = std::enable_if_t<std::is_enum_v<Enum>>>
  operator Enum() const {
    return static_cast<Enum>(value);
  }
};

// ExecuTorch's codes (runtime/core/error.h).
constexpr int32_t kOk = 0x00;
constexpr int32_t kInternal = 0x01;
constexpr int32_t kInvalidArgument = 0x12;
constexpr int32_t kMemoryAllocationFailed = 0x21;

template <class Body>
ErrorCode guarded(const char* function, Body&& body) noexcept {
  int32_t code = kInternal;
  std::string message;
  try {
    body();
    return {kOk};
  } catch (const std::bad_alloc&) {
    code = kMemoryAllocationFailed;
    message = "out of memory";
  } catch (const std::invalid_argument& error) {
    code = kInvalidArgument;
    message = error.what();
  } catch (const std::exception& error) {
    message = error.what();
  } catch (...) {
    message = "unknown exception";
  }
  try {
    set_last_error(std::string(function) + ": " + message);
  } catch (...) {
    // The code still tells the caller it failed.
  }
  return {code};
}

}  // namespace metal_runtime
}  // namespace shimkit
