// Autorelease pools (@autoreleasepool, NSAutoreleasePool) and the C entry points to reference counting.
//
// Each thread keeps one stack of autoreleased objects; a pool is a mark in it. Popping a pool releases what was
// autoreleased since its mark, newest first, including into pools pushed inside it and never popped (an
// exception that left an @autoreleasepool block skips its pop). Objects autoreleased outside every pool are
// kept until the thread ends: its stack is drained then.
//
// The main thread's stack is drained first thing in exit() (thread-local destructors run before static ones),
// and a LeakSanitizer build checks for leaks right there: before static destructors empty the program's
// process-lifetime containers (`static std::unordered_map<void*, id<MTLBuffer>>`, as ExecuTorch's Metal shims
// keep), whose objects would otherwise read as leaked. Objects they still hold are reachable then; everything
// else not freed is a leak.
#include "internal.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

extern "C" void __lsan_do_leak_check(void) __attribute__((weak));

namespace {

SEL selector(const char* name) { return sel_registerName(name); }

id send(id receiver, SEL sel) { return reinterpret_cast<id (*)(id, SEL)>(objc_msg_lookup(receiver, sel))(receiver, sel); }

struct PoolStack {
  std::vector<id> objects;

  void pop_to(size_t mark) {
    static SEL release = selector("release");
    // A release may autorelease more objects (a -dealloc's own cleanup): those are drained too.
    while (objects.size() > mark) {
      id object = objects.back();
      objects.pop_back();
      send(object, release);
    }
  }
};

// The stack is reached through plain thread-locals, valid to the very end of the thread: static destructors run
// after the main thread's thread-local ones, and may still autorelease. Once a thread's stack is drained for
// good, what it autoreleases is kept, never released (as Apple's runtime does with no pool in place).
thread_local PoolStack* current_stack = nullptr;
thread_local bool stack_finished = false;

struct StackOwner {
  ~StackOwner() {
    if (current_stack) {
      current_stack->pop_to(0);
      delete current_stack;
      current_stack = nullptr;
    }
    stack_finished = true;
    if (__lsan_do_leak_check && getpid() == pid_t(syscall(SYS_gettid))) __lsan_do_leak_check();
  }
};

thread_local StackOwner stack_owner;

PoolStack* pool_stack() {
  if (!current_stack && !stack_finished) {
    (void)&stack_owner;  // its first use registers its destructor for this thread
    current_stack = new PoolStack;
  }
  return current_stack;
}

// The loading thread's stack exists from the start, so that its destructor is registered (the main thread's
// for a program linked against the framework).
__attribute__((constructor)) void create_loading_threads_stack() { pool_stack(); }

}  // namespace

extern "C" {

// A pool's token is its mark plus one, so that no token is null.
void* objc_autoreleasePoolPush(void) {
  PoolStack* stack = pool_stack();
  return reinterpret_cast<void*>((stack ? stack->objects.size() : 0) + 1);
}

void objc_autoreleasePoolPop(void* pool) {
  PoolStack* stack = pool_stack();
  if (pool && stack) stack->pop_to(reinterpret_cast<uintptr_t>(pool) - 1);
}

// NSObject's -autorelease: the object joins the innermost pool.
OBJC_PUBLIC void objc_shimkit_autorelease_add(id object) {
  if (PoolStack* stack = pool_stack()) stack->objects.push_back(object);
}

id objc_retain(id object) {
  if (!object || is_small_object(object)) return object;
  static SEL retain = selector("retain");
  return send(object, retain);
}

void objc_release(id object) {
  if (!object || is_small_object(object)) return;
  static SEL release = selector("release");
  send(object, release);
}

id objc_autorelease(id object) {
  if (!object || is_small_object(object)) return object;
  static SEL autorelease = selector("autorelease");
  return send(object, autorelease);
}

id objc_retainAutoreleasedReturnValue(id object) { return objc_retain(object); }
id objc_autoreleaseReturnValue(id object) { return objc_autorelease(object); }
OBJC_PUBLIC id objc_retainAutorelease(id object) { return objc_autorelease(objc_retain(object)); }

}  // extern "C"
