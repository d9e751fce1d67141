// A synchronous stand-in for Grand Central Dispatch (<dispatch/dispatch.h>): every block runs on the calling
// thread under its queue's mutex. Code that waits for an async block to finish (a semaphore, dispatch_group)
// would wait on something already done, and code that relies on real concurrency gets none.
#include <dispatch/dispatch.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

struct shimkit_dispatch_queue_s {
  std::atomic<long> references{1};
  std::string label;
  // Recursive: a block that dispatch_syncs to its own queue deadlocks on Apple, but here merely runs.
  std::recursive_mutex mutex;
  bool permanent = false;  // the main and global queues, never freed
};

namespace {

dispatch_queue_t permanent_queue(const char* label) {
  auto* queue = new shimkit_dispatch_queue_s;
  queue->label = label;
  queue->permanent = true;
  return queue;
}

void run_on(dispatch_queue_t queue, void* context, dispatch_function_t work) {
  if (!queue) std::abort();
  std::lock_guard<std::recursive_mutex> guard(queue->mutex);
  work(context);
}

void call_block(void* block) { reinterpret_cast<dispatch_block_t>(block)(); }

}  // namespace

extern "C" {

dispatch_queue_t dispatch_queue_create(const char* label, dispatch_queue_attr_t) {
  auto* queue = new shimkit_dispatch_queue_s;
  queue->label = label ? label : "";
  return queue;
}

dispatch_queue_t dispatch_get_main_queue(void) {
  static dispatch_queue_t queue = permanent_queue("com.apple.main-thread");
  return queue;
}

dispatch_queue_t dispatch_get_global_queue(long, unsigned long) {
  static dispatch_queue_t queue = permanent_queue("com.apple.root.default-qos");
  return queue;
}

const char* dispatch_queue_get_label(dispatch_queue_t queue) { return queue ? queue->label.c_str() : ""; }

void dispatch_retain(void* object) {
  auto* queue = static_cast<dispatch_queue_t>(object);
  if (queue && !queue->permanent) queue->references.fetch_add(1, std::memory_order_relaxed);
}

void dispatch_release(void* object) {
  auto* queue = static_cast<dispatch_queue_t>(object);
  if (queue && !queue->permanent && queue->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete queue;
}

void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block) { run_on(queue, reinterpret_cast<void*>(block), call_block); }
void dispatch_async(dispatch_queue_t queue, dispatch_block_t block) { run_on(queue, reinterpret_cast<void*>(block), call_block); }
void dispatch_barrier_sync(dispatch_queue_t queue, dispatch_block_t block) { run_on(queue, reinterpret_cast<void*>(block), call_block); }
void dispatch_sync_f(dispatch_queue_t queue, void* context, dispatch_function_t work) { run_on(queue, context, work); }
void dispatch_async_f(dispatch_queue_t queue, void* context, dispatch_function_t work) { run_on(queue, context, work); }

void dispatch_once_f(long* predicate, void* context, dispatch_function_t function) {
  // The predicate is the caller's zero-initialised long: 0 not run, 1 running, 2 done.
  auto* state = reinterpret_cast<std::atomic<long>*>(predicate);
  long expected = 0;
  if (state->load(std::memory_order_acquire) == 2) return;
  if (state->compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    function(context);
    state->store(2, std::memory_order_release);
    return;
  }
  while (state->load(std::memory_order_acquire) != 2) {
  }
}

void dispatch_once(dispatch_once_t* predicate, dispatch_block_t block) {
  dispatch_once_f(predicate, reinterpret_cast<void*>(block), call_block);
}

}  // extern "C"
