// What the stand-in's C++ tells its Objective-C++ part (runtime/native/et_metal_objc.mm), which a runtime carries
// only where a plugin adapter is Objective-C++ (an MPSGraph kernel): weak symbols, so a runtime without that part
// calls nothing.
//
// - Data pointers: every tensor the runtime makes registers its data pointer (and the bytes it spans from there), and
//   unregisters it when deleted, so that ptr_to_mtl_buffer holds a buffer for each, as upstream's does.
// - Encoded work: the Objective-C++ part encodes MPSGraph work on the stream's command buffer to run later, as
//   upstream's ETMetalStream does; everything else in the stand-in runs at once. Whatever runs at once first runs
//   what was encoded before it (run_encoded_work), which keeps the stream's order, and so does a tensor's delete (on a
//   Mac the command buffer keeps the buffers it reads alive); ETMetalStream::synchronize commits it with upstream's
//   sync types.
#pragma once

#include <cstddef>

extern "C" {
__attribute__((weak)) void shimkit_runtime_data_pointer_made(void* data, size_t bytes);
__attribute__((weak)) void shimkit_runtime_data_pointer_released(void* data);
// `sync_type` is an executorch::backends::metal::SyncType.
__attribute__((weak)) void shimkit_runtime_synchronize_encoded_work(int sync_type);
}

namespace shimkit {
namespace metal_runtime {

// SyncType::COMMIT_AND_WAIT's value.
constexpr int kCommitAndWait = 2;

inline void run_encoded_work() {
  if (shimkit_runtime_synchronize_encoded_work != nullptr) shimkit_runtime_synchronize_encoded_work(kCommitAndWait);
}

inline void data_pointer_made(void* data, size_t bytes) {
  if (shimkit_runtime_data_pointer_made != nullptr && data != nullptr && bytes != 0) {
    shimkit_runtime_data_pointer_made(data, bytes);
  }
}

inline void data_pointer_released(void* data, size_t bytes) {
  if (shimkit_runtime_data_pointer_released != nullptr && data != nullptr && bytes != 0) {
    shimkit_runtime_data_pointer_released(data);
  }
}

}  // namespace metal_runtime
}  // namespace shimkit
