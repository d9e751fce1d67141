// Switching between the fibers of a threadgroup without a system call.
//
// glibc's swapcontext saves and restores the signal mask with rt_sigprocmask on every switch, and
// getcontext/makecontext do it again per thread per group; a group of 1024 threads meeting two simdgroup
// functions and a barrier pays several thousand system calls. On x86-64 a fiber switch here only saves
// the registers the System V ABI makes the callee keep (rbx, rbp, r12-r15, the stack pointer, MXCSR's
// and the x87 control word's settings) on the old stack and pops them from the new one. Elsewhere, and
// under AddressSanitizer (which follows stack switches through its swapcontext interceptor, not through
// hand-written ones), fibers switch with ucontext as before.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(SHIMKIT_METAL_UCONTEXT)
#define SHIMKIT_METAL_FAST_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace shimkit_metal {

#if SHIMKIT_METAL_FAST_SWITCH

extern "C" {
// Saves the caller's callee-saved state on its stack, stores that stack pointer in *save and resumes
// the context whose stack pointer is `load`.
void shimkit_metal_switch(void** save, void* load);
// Where a new fiber starts: calls r13 (its entry) with r12 (its argument) and never returns.
void shimkit_metal_fiber_start();
}

// One copy per shared library however many translation units include this (a COMDAT group), hidden so
// two kernels' libraries never bind to each other's copy.
asm(R"(
  .pushsection .text.shimkit_metal_switch,"axG",@progbits,shimkit_metal_switch,comdat
  .weak shimkit_metal_switch
  .hidden shimkit_metal_switch
  .type shimkit_metal_switch,@function
shimkit_metal_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size shimkit_metal_switch, .-shimkit_metal_switch
  .popsection
  .pushsection .text.shimkit_metal_fiber_start,"axG",@progbits,shimkit_metal_fiber_start,comdat
  .weak shimkit_metal_fiber_start
  .hidden shimkit_metal_fiber_start
  .type shimkit_metal_fiber_start,@function
shimkit_metal_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size shimkit_metal_fiber_start, .-shimkit_metal_fiber_start
  .popsection
)");

struct Context {
  void* stack_pointer = nullptr;
};

// Lays out on `stack` the frame shimkit_metal_switch pops so that switching to it calls
// entry(argument) on that stack with the caller's floating-point settings.
inline void prepare_context(Context& context, char* stack, size_t bytes, void (*entry)(void*), void* argument) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  // fiber_start is entered by `ret` with a stack aligned to 16, so that its call gives entry the ABI's
  // alignment; the frame below it is 8 (settings) + 6 x 8 (registers) + 8 (return address) bytes.
  uint64_t* frame = reinterpret_cast<uint64_t*>(top - 64 - 16);
  uint32_t mxcsr;
  uint16_t x87;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87));
  frame[0] = uint64_t(mxcsr) | (uint64_t(x87) << 32);
  frame[1] = 0;                                            // r15
  frame[2] = 0;                                            // r14
  frame[3] = reinterpret_cast<uint64_t>(entry);            // r13
  frame[4] = reinterpret_cast<uint64_t>(argument);         // r12
  frame[5] = 0;                                            // rbx
  frame[6] = 0;                                            // rbp
  frame[7] = reinterpret_cast<uint64_t>(&shimkit_metal_fiber_start);
  context.stack_pointer = frame;
}

inline void switch_context(Context& from, Context& to) { shimkit_metal_switch(&from.stack_pointer, to.stack_pointer); }

#else

struct Context {
  ucontext_t state;
};

// makecontext passes int arguments only: the entry and its argument travel as four halves.
inline void start_ucontext(unsigned entry_high, unsigned entry_low, unsigned argument_high, unsigned argument_low) {
  auto entry = reinterpret_cast<void (*)(void*)>((uintptr_t(entry_high) << 32) | entry_low);
  entry(reinterpret_cast<void*>((uintptr_t(argument_high) << 32) | argument_low));
}

inline void prepare_context(Context& context, char* stack, size_t bytes, void (*entry)(void*), void* argument) {
  getcontext(&context.state);
  context.state.uc_stack.ss_sp = stack;
  context.state.uc_stack.ss_size = bytes;
  context.state.uc_link = nullptr;
  const uintptr_t value = reinterpret_cast<uintptr_t>(argument);
  const uintptr_t function = reinterpret_cast<uintptr_t>(entry);
  makecontext(&context.state, reinterpret_cast<void (*)()>(&start_ucontext), 4,
              static_cast<unsigned>(function >> 32), static_cast<unsigned>(function & 0xffffffffu),
              static_cast<unsigned>(value >> 32), static_cast<unsigned>(value & 0xffffffffu));
}

inline void switch_context(Context& from, Context& to) { swapcontext(&from.state, &to.state); }

#endif

}  // namespace shimkit_metal
