// How a compiled MSL kernel runs on the CPU: Metal's dispatchThreads grid (partial edge threadgroups),
// one threadgroup after another on each worker thread, and, for kernels that synchronise
// (threadgroup_barrier, simd_* functions), the threads of a group as cooperative fibers (context.h
// switches them; their stacks are allocated once per worker and reused for every group it runs).
//
// A fiber runs until it reaches a barrier or a simdgroup function, then yields to the group's
// scheduler; when every live thread of the group waits at the barrier, or every live lane of a
// simdgroup waits at a simdgroup function, they are released together (the simdgroup function's
// result computed for all lanes at once). Lanes that finished, or that wait elsewhere when nothing
// else can progress (divergent control flow), take no part, as Metal's inactive lanes. A group in
// which no thread can progress is a deadlock, reported with what each thread waits for.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "context.h"
#include "types.h"

namespace shimkit_metal {

using metal::uint;
constexpr uint kSimdWidth = 32;
constexpr unsigned long long kAllEight = 0x0101010101010101ull;  // eight bools, all true, read as one word
constexpr size_t kLaneBytes = 64;

struct ThreadInfo {
  uint grid[3], in_group[3], group[3], group_size[3], grid_size[3], groups[3];
  uint index_in_group, lane, simd_index, simds_per_group;
  uint reverse;  // a split kernel's regions run their threads last to first (the race check)
};

struct Dispatch {
  unsigned long threads[3];
  unsigned long group[3];
  int workers;
  int reverse = 0;  // see ThreadInfo::reverse
};

struct Fiber;
using Combine = void (*)(Fiber** lanes);
enum class Wait { kReady, kBarrier, kSimd, kDone };

struct Fiber {
  Context context;
  Wait state = Wait::kReady;
  ThreadInfo info;
  Combine combine = nullptr;
  long argument = 0;
  alignas(32) unsigned char value[kLaneBytes];
  alignas(32) unsigned char fill[kLaneBytes];
  alignas(32) unsigned char result[kLaneBytes];
};

struct Scheduler;
struct LaneReplay;
enum class LoopMode { kOff, kRecord, kReplay };

// What the worker thread is running, in one thread_local: a shared library reaches its thread_locals
// through a call of __tls_get_addr, so a simdgroup function takes the address once and a split group keeps it.
struct Executing {
  Scheduler* scheduler = nullptr;  // the fiber scheduler of the group, when it runs on fibers
  Fiber* fiber = nullptr;          // the running fiber, or the lane record of the running split thread
  LoopMode loop_mode = LoopMode::kOff;
  LaneReplay* replay = nullptr;    // the running split thread's results to replay
};
inline thread_local Executing executing;

[[noreturn]] inline void not_cooperative(const char* what) {
  throw std::logic_error(std::string(what) +
                         " called in a kernel shimkit.metal runs without fibers: its use was not found "
                         "in the kernel's call graph (report this as a shimkit.metal bug)");
}

struct Scheduler {
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  Context home;
  size_t stack_bytes = 256 * 1024;
  // Stacks of one size allocated together start at the same offset modulo every cache's set stride, so
  // the frames of all fibers of a group would compete for one L1/L2 set; each fiber's stack top is moved
  // down by a different multiple of 9 cache lines (about a frame) within this much padding.
  static constexpr size_t kStaggerBytes = 64 * 1024;
  static constexpr size_t kStaggerStep = 9 * 64;
  const std::function<void(const ThreadInfo&)>* body = nullptr;
  std::exception_ptr failure;

  static void entry(void* scheduler) {
    Scheduler* self = static_cast<Scheduler*>(scheduler);
    Fiber* fiber = executing.fiber;
    try {
      (*self->body)(fiber->info);
    } catch (...) {
      if (!self->failure) self->failure = std::current_exception();
    }
    fiber->state = Wait::kDone;
    switch_context(fiber->context, self->home);
  }

  void yield(Wait why) {
    Fiber* fiber = executing.fiber;
    fiber->state = why;
    switch_context(fiber->context, home);
  }

  // Runs one threadgroup whose threads are `infos`.
  void run_group(const std::vector<ThreadInfo>& infos, const std::function<void(const ThreadInfo&)>& kernel) {
    const size_t n = infos.size();
    fibers.resize(n);
    while (stacks.size() < n) stacks.emplace_back(new char[stack_bytes + kStaggerBytes]);
    body = &kernel;
    for (size_t i = 0; i < n; ++i) {
      Fiber& f = fibers[i];
      f.state = Wait::kReady;
      f.info = infos[i];
      prepare_context(f.context, stacks[i].get(), stack_bytes + kStaggerBytes - i * kStaggerStep % kStaggerBytes,
                      &Scheduler::entry, this);
    }
    Executing& now = executing;
    Scheduler* previous = now.scheduler;
    now.scheduler = this;
    size_t done = 0;
    while (done < n) {
      for (size_t i = 0; i < n; ++i) {
        if (fibers[i].state != Wait::kReady) continue;
        now.fiber = &fibers[i];
        switch_context(home, fibers[i].context);
        now.fiber = nullptr;
        if (fibers[i].state == Wait::kDone) ++done;
      }
      if (failure) break;
      if (done < n && !release(false) && !release(true)) deadlock();
    }
    now.scheduler = previous;
    if (failure) {
      std::exception_ptr error = failure;
      failure = nullptr;
      std::rethrow_exception(error);
    }
  }

  // Releases waiting threads whose condition is met; `divergent` lets a simdgroup function go ahead
  // with the lanes waiting at it while other live lanes of its simdgroup wait elsewhere.
  bool release(bool divergent) {
    bool released = false;
    const size_t n = fibers.size();
    for (size_t first = 0; first < n; first += kSimdWidth) {
      const size_t last = (n < first + kSimdWidth ? n : first + kSimdWidth);
      Fiber* lanes[kSimdWidth] = {};
      Combine op = nullptr;
      bool everyone = true;
      for (size_t i = first; i < last; ++i) {
        Fiber& f = fibers[i];
        if (f.state == Wait::kSimd && (op == nullptr || f.combine == op)) {
          op = f.combine;
          lanes[i - first] = &f;
        } else if (f.state != Wait::kDone) {
          everyone = false;
        }
      }
      if (op == nullptr || (!everyone && !divergent)) continue;
      op(lanes);
      for (Fiber* f : lanes)
        if (f) f->state = Wait::kReady;
      released = true;
      if (divergent) return true;  // one simdgroup at a time, then let the others run again
    }
    if (released) return true;
    size_t live = 0, waiting = 0;
    for (Fiber& f : fibers) {
      if (f.state == Wait::kDone) continue;
      ++live;
      waiting += f.state == Wait::kBarrier;
    }
    if (live > 0 && waiting == live) {
      for (Fiber& f : fibers)
        if (f.state == Wait::kBarrier) f.state = Wait::kReady;
      return true;
    }
    return false;
  }

  [[noreturn]] void deadlock() {
    size_t at_barrier = 0, done = 0;
    for (Fiber& f : fibers) {
      at_barrier += f.state == Wait::kBarrier;
      done += f.state == Wait::kDone;
    }
    const ThreadInfo& g = fibers.front().info;
    throw std::runtime_error(
        "threadgroup (" + std::to_string(g.group[0]) + ", " + std::to_string(g.group[1]) + ", " +
        std::to_string(g.group[2]) + ") cannot progress: " + std::to_string(at_barrier) + " of its " +
        std::to_string(fibers.size()) + " threads wait at threadgroup_barrier while " +
        std::to_string(done) + " have returned (Metal requires every thread of a threadgroup to reach "
        "the barrier)");
  }
};

inline void threadgroup_barrier_wait() {
  Executing& now = executing;
  if (now.scheduler == nullptr || now.fiber == nullptr) not_cooperative("threadgroup_barrier");
  now.scheduler->yield(Wait::kBarrier);
}

// ---- split kernels (loops.h) ----

constexpr int kMaxCollectivesPerCall = 8;

struct LaneReplay {
  int recorded = 0;  // results available to replay
  int next = 0;      // the next simdgroup function reached in this evaluation
  bool pending = false;
  alignas(32) unsigned char results[kMaxCollectivesPerCall][kLaneBytes];
};

// A simdgroup function in a split kernel (loops.h): records its operand, or replays its result.
template <class T>
inline void loop_collective(const Executing& now, const T& value, Combine combine, long argument, const T* fill,
                            T& out) {
  LaneReplay& replay = *now.replay;
  Fiber& lane = *now.fiber;
  const int index = replay.next++;
  if (index < replay.recorded) {
    std::memcpy(static_cast<void*>(&out), replay.results[index], sizeof(T));
    return;
  }
  if (now.loop_mode == LoopMode::kReplay)
    throw std::logic_error("a split statement reached a simdgroup function its split point did not evaluate "
                           "(report this as a shimkit.metal bug)");
  if (!replay.pending) {
    if (index >= kMaxCollectivesPerCall)
      throw std::runtime_error("a call reaches more than " + std::to_string(kMaxCollectivesPerCall) +
                               " simdgroup functions in a row; shimkit.metal cannot split it");
    replay.pending = true;
    std::memcpy(lane.value, &value, sizeof(T));
    if (fill) std::memcpy(lane.fill, fill, sizeof(T));
    lane.argument = argument;
    lane.combine = combine;
  }
  std::memcpy(static_cast<void*>(&out), &value, sizeof(T));  // a placeholder the evaluation discards
}

template <class T>
inline T simd_collective(const T& value, Combine combine, long argument = 0, const T* fill = nullptr) {
  static_assert(sizeof(T) <= kLaneBytes, "simdgroup function on a type larger than 64 bytes");
  Executing& now = executing;
  if (now.loop_mode != LoopMode::kOff) {
    T out;
    loop_collective(now, value, combine, argument, fill, out);
    return out;
  }
  if (now.scheduler == nullptr || now.fiber == nullptr) not_cooperative("a simdgroup function");
  Fiber* fiber = now.fiber;
  std::memcpy(fiber->value, &value, sizeof(T));
  if (fill) std::memcpy(fiber->fill, fill, sizeof(T));
  fiber->argument = argument;
  fiber->combine = combine;
  now.scheduler->yield(Wait::kSimd);
  T out;
  std::memcpy(static_cast<void*>(&out), fiber->result, sizeof(T));
  return out;
}

template <class T> inline T lane_value(const Fiber* f) {
  T v;
  std::memcpy(static_cast<void*>(&v), f->value, sizeof(T));
  return v;
}
template <class T> inline void set_result(Fiber* f, const T& v) { std::memcpy(f->result, &v, sizeof(T)); }

// ---- grid traversal ----

inline unsigned long groups_along(unsigned long threads, unsigned long group) {
  return threads == 0 ? 0 : (threads + group - 1) / group;
}

// How a kernel's threads run: a row of a group's threads at a time (no barrier or simdgroup function: the
// body takes the row's first thread and its length, and runs the row as one loop the compiler vectorises),
// as loops split at its barriers (the body takes a whole group, its uniform fields and its thread count:
// loops.h), or as cooperative fibers.
enum class Execution { kRows, kSplit, kFibers };

template <Execution E, class Body>
inline void run_groups(const Dispatch& d, unsigned long begin, unsigned long end, Body& body) {
  constexpr bool cooperative = E == Execution::kFibers;
  const unsigned long gx = groups_along(d.threads[0], d.group[0]);
  const unsigned long gy = groups_along(d.threads[1], d.group[1]);
  const unsigned long gz = groups_along(d.threads[2], d.group[2]);
  std::unique_ptr<Scheduler> scheduler;
  std::function<void(const ThreadInfo&)> kernel;
  std::vector<ThreadInfo> infos;
  if constexpr (cooperative) {
    scheduler.reset(new Scheduler());
    kernel = [&body](const ThreadInfo& t) { body(t); };
  }
  for (unsigned long linear = begin; linear < end; ++linear) {
    ThreadInfo t{};
    const unsigned long g[3] = {linear % gx, (linear / gx) % gy, linear / (gx * gy)};
    uint size[3];
    for (int k = 0; k < 3; ++k) {
      t.group[k] = static_cast<uint>(g[k]);
      const unsigned long start = g[k] * d.group[k];
      size[k] = static_cast<uint>(d.group[k] < d.threads[k] - start ? d.group[k] : d.threads[k] - start);  // partial edge group
      t.group_size[k] = size[k];
      t.grid_size[k] = static_cast<uint>(d.threads[k]);
    }
    t.groups[0] = static_cast<uint>(gx);
    t.groups[1] = static_cast<uint>(gy);
    t.groups[2] = static_cast<uint>(gz);
    const uint count = size[0] * size[1] * size[2];
    t.simds_per_group = (count + kSimdWidth - 1) / kSimdWidth;
    if constexpr (E == Execution::kSplit) {  // a split group computes its threads' coordinates (loops.h)
      t.reverse = d.reverse != 0;
      for (int k = 0; k < 3; ++k) t.grid[k] = static_cast<uint>(g[k] * d.group[k]);
      if (count > 0) body(t, count);
      continue;
    }
    if (cooperative) infos.clear();
    uint index = 0;
    for (uint z = 0; z < size[2]; ++z) {
      for (uint y = 0; y < size[1]; ++y) {
        if constexpr (E == Execution::kRows) {
          t.in_group[0] = 0;
          t.in_group[1] = y;
          t.in_group[2] = z;
          t.grid[0] = static_cast<uint>(g[0] * d.group[0]);
          t.grid[1] = static_cast<uint>(g[1] * d.group[1] + y);
          t.grid[2] = static_cast<uint>(g[2] * d.group[2] + z);
          t.index_in_group = index;
          if (size[0] > 0) body(t, size[0]);
          index += size[0];
        } else {
          for (uint x = 0; x < size[0]; ++x, ++index) {
            t.in_group[0] = x;
            t.in_group[1] = y;
            t.in_group[2] = z;
            t.grid[0] = static_cast<uint>(g[0] * d.group[0] + x);
            t.grid[1] = static_cast<uint>(g[1] * d.group[1] + y);
            t.grid[2] = static_cast<uint>(g[2] * d.group[2] + z);
            t.index_in_group = index;
            t.lane = index % kSimdWidth;
            t.simd_index = index / kSimdWidth;
            infos.push_back(t);
          }
        }
      }
    }
    if constexpr (cooperative) {
      if (!infos.empty()) scheduler->run_group(infos, kernel);
    }
  }
}

inline thread_local std::string last_error;

// A dry call of a kernel that declares threadgroup memory: it adds each declaration's size, rounded to
// 16 bytes as Metal allocates it, and returns right after the last one.
inline thread_local bool measuring = false;
inline thread_local unsigned long measured = 0;

template <class Call>
inline unsigned long measure_threadgroup(Call call) {
  measuring = true;
  measured = 0;
  try {
    call();
  } catch (...) {
  }
  measuring = false;
  return measured;
}

// Threads that outlive a launch. Starting std::threads on every launch cost tens of microseconds each on a quiet
// machine and far more under load (the elementwise bench during a CI run: 7.0x eager, where POCL's pool stayed
// at 0.78x). Waking a thread asleep on a condition variable still costs about 60 microseconds here, more than
// a 1M-element elementwise kernel takes on one core, so a worker first spins for a while after each launch
// (as OpenMP runtimes do) and sleeps only when no launch came: back-to-back launches, a program's kernels,
// start at once. One launch uses the pool at a time, and a launch that finds it busy (another host thread, or
// a kernel launched from inside one) starts its own threads.
class WorkerPool {
 public:
  // Runs share(w) for every w in [0, workers): share(0) on the calling thread, the others on the pool's
  // threads; returns once all have. False, having run nothing, when another launch holds the pool.
  bool try_run(int workers, const std::function<void(int)>& share) {
    std::unique_lock<std::mutex> held(in_use_, std::try_to_lock);
    if (!held.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(state_);
      while (started_ < workers - 1) {
        ++started_;
        // Detached: the pool lives as long as the process (see worker_pool), and exit ends the threads.
        std::thread([this, id = started_] { serve(id); }).detach();
      }
      job_ = &share;
      job_workers_ = workers;
      pending_.store(workers - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();  // no system call when every worker is still spinning
    share(0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(state_);
      finished_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    job_ = nullptr;
    return true;
  }

 private:
  // How long a thread spins before it sleeps: a few times the cost of a wake-up, short enough that idle
  // workers give the core back well within a test's or a program's pause between kernels.
  static constexpr auto kSpin = std::chrono::microseconds(200);

  template <class Ready>
  static bool spin_until(Ready ready) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (unsigned n = 1;; ++n) {
      if (ready()) return true;
      if (n % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  void serve(int id) {
    unsigned long seen = 0;
    for (;;) {
      const auto arrived = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      const bool spun = spin_until(arrived);
      // Under the lock, the launch and its size are read together: a worker left out of one launch must not
      // take the next launch's size with the generation it skipped.
      std::unique_lock<std::mutex> lock(state_);
      if (!spun) wake_.wait(lock, arrived);
      seen = generation_.load(std::memory_order_relaxed);
      if (id >= job_workers_) continue;  // a smaller launch than the pool
      const std::function<void(int)>* job = job_;
      lock.unlock();
      (*job)(id);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(state_);  // the launcher checks pending_ under it before sleeping
        finished_.notify_one();
      }
    }
  }

  std::mutex in_use_;
  std::mutex state_;
  std::condition_variable wake_, finished_;
  const std::function<void(int)>* job_ = nullptr;
  int job_workers_ = 0, started_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<unsigned long> generation_{0};
};

// The process's pool, made on first use and never destroyed: a destructor at exit would wait on threads that
// may be gone. A forked child (the audit's workers) makes its own: the parent's threads do not exist there.
inline WorkerPool& worker_pool() {
  static std::mutex guard;
  static WorkerPool* pool = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(guard);
  if (pool == nullptr || owner != getpid()) {
    pool = new WorkerPool();
    owner = getpid();
  }
  return *pool;
}

// Runs the grid; returns 0, or -1 with last_error set.
template <Execution E, class Body>
inline int launch(const Dispatch& d, Body body) {
  try {
    const unsigned long total = groups_along(d.threads[0], d.group[0]) * groups_along(d.threads[1], d.group[1]) *
                                groups_along(d.threads[2], d.group[2]);
    const unsigned long threads = d.threads[0] * d.threads[1] * d.threads[2];
    int workers = d.workers < 1 ? 1 : d.workers;
    if (static_cast<unsigned long>(workers) > total) workers = static_cast<int>(total);
    if (threads < 65536) workers = 1;  // not worth a thread
    if (workers <= 1) {
      run_groups<E>(d, 0, total, body);
      return 0;
    }
    std::vector<std::exception_ptr> failures(workers);
    const std::function<void(int)> share = [&](int w) {
      try {
        run_groups<E>(d, total * w / workers, total * (w + 1) / workers, body);
      } catch (...) {
        failures[w] = std::current_exception();
      }
    };
    if (!worker_pool().try_run(workers, share)) {
      std::vector<std::thread> own;
      for (int w = 1; w < workers; ++w) own.emplace_back(share, w);
      share(0);
      for (auto& t : own) t.join();
    }
    for (auto& f : failures)
      if (f) std::rethrow_exception(f);
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown exception";
  }
  return -1;
}

// The thread at grid position `x` of the row starting at `row` (Execution::kRows). The row's loop counts
// grid positions, not offsets in the row: a counter that cannot wrap is what lets the compiler see
// consecutive threads address consecutive elements.
inline ThreadInfo in_row(const ThreadInfo& row, uint x) {
  ThreadInfo t = row;
  t.in_group[0] = x - row.grid[0];
  t.grid[0] = x;
  t.index_in_group = row.index_in_group + t.in_group[0];
  t.lane = t.index_in_group % kSimdWidth;
  t.simd_index = t.index_in_group / kSimdWidth;
  return t;
}

// ---- binding kernel parameters ----

template <class F> struct signature;
template <class R, class... P> struct signature<R (*)(P...)> { using params = std::tuple<P...>; };
template <auto F, int I> using param_t = std::tuple_element_t<I, typename signature<decltype(F)>::params>;

template <class P> inline P from_buffer(void* pointer) {
  if constexpr (std::is_pointer_v<P>) {
    return static_cast<P>(pointer);
  } else {
    static_assert(std::is_reference_v<P>, "a buffer parameter must be a pointer or a reference");
    return *static_cast<std::remove_reference_t<P>*>(pointer);
  }
}

template <class P> inline P from_position(const uint (&v)[3]) {
  using V = std::decay_t<P>;
  if constexpr (metal::is_vector_v<V>) {
    V r;
    for (int i = 0; i < V::size; ++i) r.v[i] = typename V::element_type(v[i]);
    return r;
  } else {
    return V(v[0]);
  }
}
template <class P> inline P from_index(uint v) { return std::decay_t<P>(v); }

}  // namespace shimkit_metal
