// What shimkit.runtime.program asks of a runtime library (load_runtime) that upstream's Metal runtime does not
// have: the resolver, the last error and the failure hooks come from runtime/native/metal_dispatch.cpp; this unit
// adds the tensor count, the (empty) divergence list, the failures upstream reports only in its log, and a way to
// wait for the work upstream's stream has queued (what MetalBackend::execute does after running a program).
//
// Upstream's functions return an error code and say why through ET_LOG(Error, ...); where the caller ignores the
// code (AOTInductor's wrapper ignores those of the encoding calls), the log is the only trace. So every Error and
// Fatal message is recorded as a failure (the first since the last take is what the host reports), and every
// message still goes to the log function that was in place before. ExecuTorch's PAL is one table per process
// (libexecutorch.so's register_pal): the emitter registered here also sees other libraries' messages, and a second
// upstream runtime loaded into the process chains onto the first.

#import <Foundation/Foundation.h>

#include <executorch/backends/apple/metal/runtime/shims/et_metal.h>
#include <executorch/backends/apple/metal/runtime/shims/memory.h>
#include <executorch/runtime/platform/platform.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

extern "C" void shimkit_runtime_record_failure(const char* message);

namespace {

pal_emit_log_message_method previous_emitter = nullptr;

void emit(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename, const char* function,
          size_t line, const char* message, size_t length) {
  if (level == kError || level == kFatal) {
    const char* base = filename != nullptr ? std::strrchr(filename, '/') : nullptr;
    std::string text = std::string(base != nullptr ? base + 1 : (filename != nullptr ? filename : "?")) + ":" +
                       std::to_string(line) + ": " + std::string(message, length);
    shimkit_runtime_record_failure(text.c_str());
  }
  if (previous_emitter != nullptr) previous_emitter(timestamp, level, filename, function, line, message, length);
}

__attribute__((constructor)) void capture_errors() {
  previous_emitter = executorch::runtime::get_pal_impl()->emit_log_message;
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(emit, __FILE__));
}

}  // namespace

extern "C" {

// How many tensor handles upstream's memory.cpp holds.
int64_t shimkit_runtime_live_tensors() {
  return static_cast<int64_t>(executorch::backends::metal::tensors.size());
}

// Commits what upstream's stream has encoded and waits for it: upstream's fallbacks and kernel dispatches only
// encode (outputs are not written until then). 0, or 1 with the failure recorded.
int32_t shimkit_runtime_synchronize() {
  // A kernel that fails at commit raises from -commit (an NSException: objc/include/Metal/Metal.h).
  @try {
    executorch::backends::metal::synchronize_metal_stream();
    return 0;
  } @catch (NSException* exception) {
    shimkit_runtime_record_failure(
        [[NSString stringWithFormat:@"synchronize_metal_stream: %@: %@", exception.name, exception.reason] UTF8String]);
  } @catch (...) {
    shimkit_runtime_record_failure("synchronize_metal_stream: an exception that is no NSException");
  }
  return 1;
}

// Upstream's runtime computes what it computes: it has no divergences of its own to report.
size_t shimkit_runtime_take_divergences(char* text, size_t size) {
  if (size > 0) text[0] = '\0';
  return 0;
}

}  // extern "C"
