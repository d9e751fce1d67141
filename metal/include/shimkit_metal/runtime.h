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
//
// What is the same for every kernel (the worker pool, the fiber scheduler, the lane records of split
// groups) is compiled once, in runtime.cpp, into a shared library every kernel library links against
// (shimkit/metal/library.py builds it with the libraries' own flags). Kept here, as inline code with
// std::thread, std::function and std::vector in it, every library compiled it again: 0.3 s of an
// empty library's 0.33 s went to instantiating them.
#pragma once

#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>

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
// What runtime.cpp exports; the libraries are compiled with hidden visibility.
#define SHIMKIT_RUNTIME_API __attribute__((visibility("default")))

SHIMKIT_RUNTIME_API extern thread_local constinit Executing executing;

[[noreturn]] SHIMKIT_RUNTIME_API void not_cooperative(const char* what);

// The running fiber waits (at a barrier, or at a simdgroup function) until its scheduler releases it.
SHIMKIT_RUNTIME_API void fiber_yield(Wait why);

inline void threadgroup_barrier_wait() {
  Executing& now = executing;
  if (now.scheduler == nullptr || now.fiber == nullptr) not_cooperative("threadgroup_barrier");
  fiber_yield(Wait::kBarrier);
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
  fiber_yield(Wait::kSimd);
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

// How many groups the grid has along each axis, and in all.
struct GridGroups {
  unsigned long along[3];
  unsigned long total;
};

inline GridGroups grid_groups(const Dispatch& d) {
  GridGroups g{{groups_along(d.threads[0], d.group[0]), groups_along(d.threads[1], d.group[1]),
                groups_along(d.threads[2], d.group[2])},
               0};
  g.total = g.along[0] * g.along[1] * g.along[2];
  return g;
}

// How a kernel's threads run: a row of a group's threads at a time (no barrier or simdgroup function: the
// body takes the row's first thread and its length, and runs the row as one loop the compiler vectorises),
// as loops split at its barriers (the body takes a whole group, its uniform fields and its thread count:
// loops.h), or as cooperative fibers.
enum class Execution { kRows, kSplit, kFibers };

// The group `linear` of the grid: its uniform fields in `t`, its size along each axis in `size` (an edge
// group may be partial); returns its thread count.
inline uint place_group(const Dispatch& d, const GridGroups& grid, unsigned long linear, ThreadInfo& t,
                        uint (&size)[3]) {
  const unsigned long g[3] = {linear % grid.along[0], (linear / grid.along[0]) % grid.along[1],
                             linear / (grid.along[0] * grid.along[1])};
  for (int k = 0; k < 3; ++k) {
    t.group[k] = static_cast<uint>(g[k]);
    const unsigned long start = g[k] * d.group[k];
    size[k] = static_cast<uint>(d.group[k] < d.threads[k] - start ? d.group[k] : d.threads[k] - start);
    t.group_size[k] = size[k];
    t.grid_size[k] = static_cast<uint>(d.threads[k]);
    t.groups[k] = static_cast<uint>(grid.along[k]);
    t.grid[k] = static_cast<uint>(start);  // the group's first thread
  }
  const uint count = size[0] * size[1] * size[2];
  t.simds_per_group = (count + kSimdWidth - 1) / kSimdWidth;
  return count;
}

// Runs the groups [begin, end) of the grid on fibers, `body(context, thread)` for each thread.
SHIMKIT_RUNTIME_API void run_fiber_groups(const Dispatch& d, unsigned long begin, unsigned long end,
                                          void (*body)(void*, const ThreadInfo&), void* context);

template <Execution E, class Body>
inline void run_groups(const Dispatch& d, unsigned long begin, unsigned long end, Body& body) {
  if constexpr (E == Execution::kFibers) {
    run_fiber_groups(d, begin, end, [](void* context, const ThreadInfo& t) { (*static_cast<Body*>(context))(t); },
                     &body);
  } else {
    const GridGroups groups = grid_groups(d);
    for (unsigned long linear = begin; linear < end; ++linear) {
      ThreadInfo t{};
      uint size[3];
      const uint count = place_group(d, groups, linear, t, size);
      if constexpr (E == Execution::kSplit) {  // a split group computes its threads' coordinates (loops.h)
        t.reverse = d.reverse != 0;
        if (count > 0) body(t, count);
      } else {
        const uint first[3] = {t.grid[0], t.grid[1], t.grid[2]};
        uint index = 0;
        for (uint z = 0; z < size[2]; ++z) {
          for (uint y = 0; y < size[1]; ++y) {
            t.in_group[0] = 0;
            t.in_group[1] = y;
            t.in_group[2] = z;
            t.grid[0] = first[0];
            t.grid[1] = first[1] + y;
            t.grid[2] = first[2] + z;
            t.index_in_group = index;
            if (size[0] > 0) body(t, size[0]);
            index += size[0];
          }
        }
      }
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

// Runs `share(context, w)` for every w in [0, workers): share(context, 0) on the calling thread, the others
// on the process's worker pool (runtime.cpp); returns once all have, rethrowing the first failure.
SHIMKIT_RUNTIME_API void run_shares(int workers, void (*share)(void*, int), void* context);

// Runs the grid; returns 0, or -1 with last_error set.
template <Execution E, class Body>
inline int launch(const Dispatch& d, Body body) {
  try {
    const unsigned long total = grid_groups(d).total;
    const unsigned long threads = d.threads[0] * d.threads[1] * d.threads[2];
    int workers = d.workers < 1 ? 1 : d.workers;
    if (static_cast<unsigned long>(workers) > total) workers = static_cast<int>(total);
    if (threads < 65536) workers = 1;  // not worth a thread
    if (workers <= 1) {
      run_groups<E>(d, 0, total, body);
      return 0;
    }
    struct Shares {
      const Dispatch& d;
      unsigned long total;
      int workers;
      Body& body;
    } shares{d, total, workers, body};
    run_shares(workers, [](void* context, int w) {
      Shares& s = *static_cast<Shares*>(context);
      run_groups<E>(s.d, s.total * w / s.workers, s.total * (w + 1) / s.workers, s.body);
    }, &shares);
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
