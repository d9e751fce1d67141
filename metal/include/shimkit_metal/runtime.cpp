// runtime.h's compiled half: what every kernel library shares, built once per set of compile flags into a
// shared library the kernel libraries link against (shimkit/metal/library.py): the worker pool launches
// run on, the fiber scheduler of kernels that run on fibers, and the lane records of split groups.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "loops.h"

namespace shimkit_metal {

constinit thread_local Executing executing;

void not_cooperative(const char* what) {
  throw std::logic_error(std::string(what) +
                         " called in a kernel shimkit.metal runs without fibers: its use was not found "
                         "in the kernel's call graph (report this as a shimkit.metal bug)");
}

// ---- fibers ----

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
  void (*body)(void*, const ThreadInfo&) = nullptr;
  void* context = nullptr;
  std::exception_ptr failure;

  static void entry(void* scheduler) {
    Scheduler* self = static_cast<Scheduler*>(scheduler);
    Fiber* fiber = executing.fiber;
    try {
      self->body(self->context, fiber->info);
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
  void run_group(const std::vector<ThreadInfo>& infos) {
    const size_t n = infos.size();
    fibers.resize(n);
    while (stacks.size() < n) stacks.emplace_back(new char[stack_bytes + kStaggerBytes]);
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

void fiber_yield(Wait why) { executing.scheduler->yield(why); }

void run_fiber_groups(const Dispatch& d, unsigned long begin, unsigned long end,
                      void (*body)(void*, const ThreadInfo&), void* context) {
  const GridGroups groups = grid_groups(d);
  Scheduler scheduler;
  scheduler.body = body;
  scheduler.context = context;
  std::vector<ThreadInfo> infos;
  for (unsigned long linear = begin; linear < end; ++linear) {
    ThreadInfo t{};
    uint size[3];
    place_group(d, groups, linear, t, size);
    const uint first[3] = {t.grid[0], t.grid[1], t.grid[2]};
    infos.clear();
    uint index = 0;
    for (uint z = 0; z < size[2]; ++z) {
      for (uint y = 0; y < size[1]; ++y) {
        for (uint x = 0; x < size[0]; ++x, ++index) {
          t.in_group[0] = x;
          t.in_group[1] = y;
          t.in_group[2] = z;
          t.grid[0] = first[0] + x;
          t.grid[1] = first[1] + y;
          t.grid[2] = first[2] + z;
          t.index_in_group = index;
          t.lane = index % kSimdWidth;
          t.simd_index = index / kSimdWidth;
          infos.push_back(t);
        }
      }
    }
    if (!infos.empty()) scheduler.run_group(infos);
  }
}

// ---- split groups (loops.h) ----

// A thread's lane record is a few hundred bytes: kept per worker thread, grown to the largest group.
LaneStorage lane_storage(uint count) {
  thread_local std::vector<Fiber> lanes;
  thread_local std::vector<LaneReplay> replays;
  if (lanes.size() < count) lanes.resize(count);
  if (replays.size() < count) replays.resize(count);
  return {lanes.data(), replays.data()};
}

// ---- the worker pool ----

// Threads that outlive a launch. Starting std::threads on every launch cost tens of microseconds each on a quiet
// machine and far more under load (the elementwise bench during a CI run: 7.0x eager, where POCL's pool stayed
// at 0.78x). Waking a thread asleep on a condition variable still costs about 60 microseconds here, more than
// a 1M-element elementwise kernel takes on one core, so a worker first spins for a while after each launch
// (as OpenMP runtimes do) and sleeps only when no launch came: back-to-back launches, a program's kernels,
// start at once. One launch uses the pool at a time, and a launch that finds it busy (another host thread, or
// a kernel launched from inside one) starts its own threads. One pool serves every library of the process.
class WorkerPool {
 public:
  using Share = void (*)(void*, int);

  // Runs share(context, w) for every w in [0, workers): w = 0 on the calling thread, the others on the
  // pool's threads; returns once all have. False, having run nothing, when another launch holds the pool.
  bool try_run(int workers, Share share, void* context) {
    std::unique_lock<std::mutex> held(in_use_, std::try_to_lock);
    if (!held.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(state_);
      while (started_ < workers - 1) {
        ++started_;
        // Detached: the pool lives as long as the process (see worker_pool), and exit ends the threads.
        std::thread([this, id = started_] { serve(id); }).detach();
      }
      share_ = share;
      context_ = context;
      job_workers_ = workers;
      pending_.store(workers - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();  // no system call when every worker is still spinning
    share(context, 0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(state_);
      finished_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    share_ = nullptr;
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
      const Share share = share_;
      void* const context = context_;
      lock.unlock();
      share(context, id);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(state_);  // the launcher checks pending_ under it before sleeping
        finished_.notify_one();
      }
    }
  }

  std::mutex in_use_;
  std::mutex state_;
  std::condition_variable wake_, finished_;
  Share share_ = nullptr;
  void* context_ = nullptr;
  int job_workers_ = 0, started_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<unsigned long> generation_{0};
};

// The process's pool, made on first use and never destroyed: a destructor at exit would wait on threads that
// may be gone. A forked child (the audit's workers) makes its own: the parent's threads do not exist there.
WorkerPool& worker_pool() {
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

void run_shares(int workers, void (*share)(void*, int), void* context) {
  std::vector<std::exception_ptr> failures(workers);
  struct Caught {
    void (*share)(void*, int);
    void* context;
    std::vector<std::exception_ptr>& failures;
  } caught{share, context, failures};
  const auto run = [](void* data, int w) {
    Caught& c = *static_cast<Caught*>(data);
    try {
      c.share(c.context, w);
    } catch (...) {
      c.failures[w] = std::current_exception();
    }
  };
  if (!worker_pool().try_run(workers, run, &caught)) {
    std::vector<std::thread> own;
    for (int w = 1; w < workers; ++w) own.emplace_back(run, &caught, w);
    run(&caught, 0);
    for (auto& t : own) t.join();
  }
  for (auto& f : failures)
    if (f) std::rethrow_exception(f);
}

}  // namespace shimkit_metal
