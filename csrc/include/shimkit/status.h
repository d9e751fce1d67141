// The result of a portable kernel step: ok, or an error code with a message for the caller.
//
// Kernels never throw across the C shim boundary (the AOTI ABI has no exceptions) and must not abort
// the host process on bad input, so every fallible step returns a Status and the shim turns it into
// an AOTITorchError. The message names the offending argument, because the only thing a user of an
// AOTInductor .so sees is the log line.
#pragma once

#include <string>
#include <utility>

namespace shimkit {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something the kernel's contract rejects
  kUnsupported = 2,      // valid for the op, but this device implementation cannot run it
  kInternal = 3,         // the device or runtime failed (allocation, graph execution ...)
};

class [[nodiscard]] Status {
 public:
  Status() = default;

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }
  static Status internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened ("addmm: "), keeping the code.
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);

}  // namespace shimkit

#define SHIMKIT_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::shimkit::Status shimkit_status_ = (expr);    \
    if (!shimkit_status_.is_ok()) return shimkit_status_; \
  } while (0)
