#include "shimkit/status.h"

namespace shimkit {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown status";
}

}  // namespace shimkit

#include "shimkit/aoti_adapter.h"

namespace shimkit {
namespace aoti {

namespace {
thread_local std::string last_error_message;
}

void set_last_error(std::string message) { last_error_message = std::move(message); }

const std::string& last_error() { return last_error_message; }

}  // namespace aoti
}  // namespace shimkit
