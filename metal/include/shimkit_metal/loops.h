// Work-group loops: a kernel that metal/loops.py split at its barriers and simdgroup functions runs one
// threadgroup as loops over its threads, one loop per region between two split points (POCL's
// WorkitemLoops, MCUDA, COX). Variables live across a split are per-thread arrays in the generated group
// function; this header holds what the generated code calls.
//
// A simdgroup function is a split point whose result every lane needs at once. Where the call is one of
// sync.h's own on operands that reach no other (`acc = simd_sum(acc)`: nearly every call), the region
// before it evaluates the operands into per-thread arrays, `lanes` runs the combine once per simdgroup
// over them (metal::lanes, the fibers' combine code) and the statement reads the results: no lane
// records, no second evaluation. Any other call (a function of the source that reaches simdgroup
// functions and cannot be inlined, several calls in one statement) goes the general way: the region before it
// evaluates the call once per thread in *record* mode: the first simdgroup function the call reaches
// stores its operand in the thread's lane record (a `Fiber`, the record the fiber scheduler uses) and the
// rest of the call runs on a placeholder. The recorded combine then runs once per simdgroup over the lanes
// that recorded (the same combine functions the fibers use, so both ways give the same bits). A call that
// reaches several simdgroup functions (c10's NaN-propagating `simd_max` asks `simd_any` first) is
// evaluated again, replaying the results it has, until no lane records. The statement after the split
// then runs in *replay* mode: its simdgroup functions return the lanes' results in order.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime.h"

// What loops.py puts on each group function. Its regions are loops over the group's threads whose bodies
// the kernel's statements are; GCC's -O3 inlines and unswitches them further than -O2 (Inductor's row sum
// 30% faster, a tree reduction 15%, at about 0.15 s more compile time per kernel, where -O3 for the whole
// library cost 0.4 s).
#if defined(__GNUC__) && !defined(__clang__)
#define SHIMKIT_GROUP_FUNCTION __attribute__((optimize("O3")))
#else
#define SHIMKIT_GROUP_FUNCTION
#endif

namespace shimkit_metal {

constexpr uint kMaxGroupThreads = 1024;

// The running worker thread's lane records and replays for a group of `count` threads (runtime.cpp: kept
// from group to group). Returned by value: a group that handed the runtime the address of a member would
// have escaped, and GCC would reload its fields after every store through a kernel's pointer (a tree
// reduction's loop no longer split and vectorised: 8 times slower).
struct LaneStorage {
  Fiber* lanes;
  LaneReplay* replays;
};
SHIMKIT_RUNTIME_API LaneStorage lane_storage(uint count);

// `p`, hidden from the optimiser: a group function reaches threadgroup memory (a thread_local) through
// it, so that its address is computed once per group instead of at uses inside the regions' loops.
template <class T> inline T* opaque(T* p) {
  asm("" : "+r"(p));
  return p;
}

// A thread's coordinate, as the runtime's ThreadInfo arrays hold them.
struct Coordinate {
  uint v[3];
};

// A group's thread coordinates, computed from a thread's index (not stored per thread). The group
// function keeps a copy in a local (`shimkit_p`): read from the group, they were reloaded for every
// thread after each store through a kernel's buffer, which may alias the group as far as the compiler
// knows (-fno-strict-aliasing): Inductor's row sum 1.73 -> 1.60 ms on a harness.
struct Positions {
  // `base` holds the group's uniform fields, with `grid` the grid position of its first thread.
  explicit Positions(const ThreadInfo& group) : base(group) {
    // A group along one axis (Inductor's reductions are 1 x 1024) places its index on that axis, with no
    // division per thread.
    axis = base.group_size[1] == 1 && base.group_size[2] == 1   ? 0
           : base.group_size[0] == 1 && base.group_size[2] == 1 ? 1
           : base.group_size[0] == 1 && base.group_size[1] == 1 ? 2
                                                                : -1;
    // A mask per axis rather than a test of `axis` per coordinate: with no branch in it, a region's
    // loop has one body for every axis (GCC at -O2 kept a test per thread, or four copies at -O3).
    for (int i = 0; i < 3; ++i) flat[i] = axis == i ? ~0u : 0u;
  }
  // A thread's coordinates in its group. `kAlongX`: the group function was instantiated for groups along
  // x (see on_axis), where a thread's x is its index.
  template <bool kAlongX>
  Coordinate in_group(uint t) const {
    if constexpr (kAlongX) {
      return {{t, 0u, 0u}};
    } else {
      if (axis >= 0) return {{t & flat[0], t & flat[1], t & flat[2]}};
      const uint x = base.group_size[0], y = base.group_size[1];
      return {{t % x, (t / x) % y, t / (x * y)}};
    }
  }
  template <bool kAlongX>
  Coordinate grid(uint t) const {
    const Coordinate at = in_group<kAlongX>(t);
    return {{base.grid[0] + at.v[0], base.grid[1] + at.v[1], base.grid[2] + at.v[2]}};
  }

  ThreadInfo base;
  int axis;
  uint flat[3];
};

// One threadgroup of a split kernel: which threads still run, their coordinates, and their lane records.
class LoopGroup {
 public:
  LoopGroup(const ThreadInfo& base, uint count) : positions_(base), count_(count), now_(executing) {
    if (count > kMaxGroupThreads)
      throw std::runtime_error("threadgroup of " + std::to_string(count) + " threads: Metal allows at most " +
                               std::to_string(kMaxGroupThreads));
    const LaneStorage storage = lane_storage(count);
    lanes_ = storage.lanes;
    replays_ = storage.replays;
    reverse_ = base.reverse != 0;
    std::memset(alive, 1, count);
  }
  ~LoopGroup() {
    now_.loop_mode = LoopMode::kOff;
    now_.fiber = nullptr;
    now_.replay = nullptr;
  }

  const Positions& positions() const { return positions_; }

  // Runs `region(t)` for every thread in `mask` that has not returned (first to last, or last to first
  // for the race check: Metal orders no two threads between barriers); a region returns false when its
  // thread returned from the kernel.
  template <class Region>
  __attribute__((always_inline)) void region(const bool* mask, Region&& region, LoopMode mode = LoopMode::kOff) {
    now_.loop_mode = mode;
    const auto run = [&](uint t) __attribute__((always_inline)) {
      if (!mask[t] || !alive[t]) return;
      if (mode != LoopMode::kOff) enter(t);
      if (!region(t)) leave(t);
    };
    // Four copies of the region (it is always_inline, and so is this function: left to itself, the
    // compiler kept a region of this size out of line, a call per thread): the general loop (the race
    // check's reverse order, lane records, threads that returned), and while no thread has returned, one
    // over the group with no test at all and one that reads the mask eight threads at a time (eight in:
    // no test; none in: skipped, so that a branch's few threads cost no pass over the whole group).
    // The count in a local: a kernel's store through a pointer may alias the group for all the compiler
    // knows, and a bound reloaded after each store leaves a loop uncounted (not unrolled, not vectorised).
    const uint count = count_;
    if (reverse_ || mode != LoopMode::kOff || !everyone_) {
      for (uint k = 0; k < count; ++k) run(reverse_ ? count - 1 - k : k);
    } else if (mask == alive) {
      // Unrolled: a region's body is a few instructions per thread, and one taken branch per thread
      // bounded the loop (a tree reduction 25% faster, Inductor's row sum 11%; eight gained nothing more).
#pragma GCC unroll 4
      for (uint t = 0; t < count; ++t)
        if (!region(t)) leave(t);
    } else {
      for (uint t = 0; t < count; t += 8) {
        unsigned long long word = 1;  // a partial last eight: test each thread
        const uint end = t + 8 < count ? t + 8 : count;
        if (end == t + 8) std::memcpy(&word, mask + t, sizeof(word));
        if (word == kAllEight) {  // eight threads: a loop of constant length, unrolled
          for (uint k = t; k < t + 8; ++k)
            if (!region(k)) leave(k);
        } else if (word) {
          for (uint k = t; k < end; ++k)
            if (mask[k] && !region(k)) leave(k);
        }
      }
    }
    now_.loop_mode = LoopMode::kOff;
    now_.fiber = nullptr;
  }

  // A split statement: `call(t)` evaluates its simdgroup calls until every lane has its results; then
  // `statement(t)` runs with them. `Reaches` is how many simdgroup functions the calls reach at most,
  // when the splitter knows (shimkit's own, one combine each), or 0: evaluate until no lane records.
  template <int Reaches, class Call, class Statement>
  void collective(const bool* mask, Call&& call, Statement&& statement) {
    for (uint t = 0; t < count_; ++t) replays_[t].recorded = 0;
    for (int pass = 0; Reaches == 0 || pass < Reaches; ++pass) {
      bool recorded = false;
      now_.loop_mode = LoopMode::kRecord;
      for (uint k = 0; k < count_; ++k) {
        const uint t = reverse_ ? count_ - 1 - k : k;
        if (!mask[t] || !alive[t]) continue;
        enter(t);
        call(t);
        recorded |= replays_[t].pending;
      }
      now_.loop_mode = LoopMode::kOff;
      now_.fiber = nullptr;
      if (!recorded) break;
      combine(mask);
    }
    region(mask, statement, LoopMode::kReplay);
  }

  // A simdgroup function called directly (metal::lanes): its operands are per-thread arrays, evaluated
  // by the region before; `combine(on, first)` runs once per simdgroup with a lane, `on` its active lanes
  // and `first` its first thread. No lane records, no re-evaluation.
  template <class Combine>
  void lanes(const bool* mask, Combine&& combine) const {
    for (uint first = 0; first < count_; first += kSimdWidth) {
      bool on[kSimdWidth];
      bool any = false;
      if (first + kSimdWidth <= count_) {  // a whole simdgroup: its 32 bools as four words
        unsigned long long words[kSimdWidth / 8], living[kSimdWidth / 8];
        std::memcpy(words, mask + first, sizeof(words));
        std::memcpy(living, alive + first, sizeof(living));
        for (uint k = 0; k < kSimdWidth / 8; ++k) words[k] &= living[k];
        std::memcpy(on, words, sizeof(words));
        any = (words[0] | words[1] | words[2] | words[3]) != 0;
      } else {
        for (uint i = 0; i < kSimdWidth; ++i) {
          const uint t = first + i;
          on[i] = t < count_ && mask[t] && alive[t];
          any |= on[i];
        }
      }
      if (any) combine(on, first);
    }
  }

  // c10's two-stage threadgroup reductions (`threadgroup_sum`, `_prod`, `_max`, `_min` in
  // c10/metal/reduction_utils.h) over the whole group at once, as POCL runs OpenCL's work-group functions:
  // each simdgroup combines `val`, a thread at `idx % 32 == 0` stores its simdgroup's result at
  // `data[idx / 32]`; where `size > 32` the threads at `idx < ceil(size / 32)` combine those and the one
  // at `idx == 0` stores the total at `data[0]`; every thread then reads `data[0]` into `result`. These
  // are the inlined helper's steps, the same combines over the same lanes (bit for bit); where every
  // thread runs and each `idx` is the thread's index (Inductor's reductions), each step touches the
  // threads that act in it only, instead of a loop over the group per step.
  template <class T, class Combine>
  void threadgroup_reduce(const bool* mask, T* result, T* data, const T* val, const uint* idx, uint size,
                          Combine&& combine) {
    const uint count = count_;
    if (!everyone_at_own_index(mask, idx)) return threadgroup_reduce_by_regions(mask, result, data, val, idx, size, combine);
    bool on[kSimdWidth];
    T lanes[kSimdWidth], combined[kSimdWidth];
    for (uint first = 0; first < count; first += kSimdWidth) {  // lane 0's thread stores: idx % 32 == 0
      if (first + kSimdWidth <= count) {
        data[first / kSimdWidth] = combine.whole(val + first);
        continue;
      }
      for (uint i = 0; i < kSimdWidth; ++i) on[i] = first + i < count;
      combine(on, combined, val + first);
      data[first / kSimdWidth] = combined[0];
    }
    if (size > kSimdWidth) {
      const uint partials = (size + kSimdWidth - 1) / kSimdWidth, acting = partials < count ? partials : count;
      // Read first, as the helper's region does before the combine's region writes data[0].
      T read[kMaxGroupThreads];
      for (uint t = 0; t < acting; ++t) read[t] = data[t];
      for (uint first = 0; first < acting; first += kSimdWidth) {
        for (uint i = 0; i < kSimdWidth; ++i) {
          on[i] = first + i < acting;
          lanes[i] = on[i] ? read[first + i] : T();
        }
        combine(on, combined, lanes);
        if (first == 0) data[0] = combined[0];
      }
    }
    const T total = data[0];
    for (uint t = 0; t < count; ++t) result[t] = total;
  }

  // threadgroup_reduce's steps region by region, for any `idx` and threads that returned: what the
  // inlined helper runs.
  template <class T, class Combine>
  void threadgroup_reduce_by_regions(const bool* mask, T* result, T* data, const T* val, const uint* idx,
                                     uint size, Combine& combine) {
    T combined[kMaxGroupThreads];
    lanes(mask, [&](const bool* on, uint first) { combine(on, combined + first, val + first); });
    region(mask, [&](uint t) {
      if (idx[t] % kSimdWidth == 0) data[idx[t] / kSimdWidth] = combined[t];
      return true;
    });
    if (size > kSimdWidth && any(mask)) {
      bool acting[kMaxGroupThreads];
      T read[kMaxGroupThreads];
      std::memset(acting, 0, count_);
      region(mask, [&](uint t) {
        acting[t] = idx[t] < (size + kSimdWidth - 1) / kSimdWidth;
        if (acting[t]) read[t] = data[idx[t]];
        return true;
      });
      lanes(acting, [&](const bool* on, uint first) { combine(on, combined + first, read + first); });
      region(acting, [&](uint t) {
        if (idx[t] == 0) data[0] = combined[t];
        return true;
      });
    }
    region(mask, [&](uint t) {
      result[t] = data[0];
      return true;
    });
  }

  // c10's threadgroup_argmax and _argmin over the whole group at once, as threadgroup_reduce: each
  // simdgroup's (extreme, index) (c10_lanes::Arg); where `size <= 32` that is every thread's result;
  // else a thread at `idx % 32 == 0` stores it at `arg_data` / `index_data[idx / 32]`, the threads at
  // `idx < ceil(size / 32)` combine those, the one at `idx == 0` stores the index at `index_data[0]`,
  // and every thread reads it.
  template <class T, class I, class Arg>
  void threadgroup_arg_reduce(const bool* mask, I* result, T* arg_data, I* index_data, const T* val,
                              const I* index_val, const uint* idx, uint size, Arg&& arg) {
    if (!everyone_at_own_index(mask, idx))
      return threadgroup_arg_reduce_by_regions(mask, result, arg_data, index_data, val, index_val, idx, size, arg);
    const uint count = count_;
    bool on[kSimdWidth];
    T value;
    I at;
    for (uint first = 0; first < count; first += kSimdWidth) {
      if (first + kSimdWidth <= count) {
        arg.whole(val + first, index_val + first, value, at);
      } else {
        for (uint i = 0; i < kSimdWidth; ++i) on[i] = first + i < count;
        arg(on, val + first, index_val + first, value, at);
      }
      if (size <= kSimdWidth) {
        for (uint t = first; t < first + kSimdWidth && t < count; ++t) result[t] = at;
        continue;
      }
      arg_data[first / kSimdWidth] = value;
      index_data[first / kSimdWidth] = at;
    }
    if (size <= kSimdWidth) return;
    const uint partials = (size + kSimdWidth - 1) / kSimdWidth, acting = partials < count ? partials : count;
    T values[kMaxGroupThreads];
    I indices[kMaxGroupThreads];
    for (uint t = 0; t < acting; ++t) {
      values[t] = arg_data[t];
      indices[t] = index_data[t];
    }
    for (uint first = 0; first < acting; first += kSimdWidth) {
      for (uint i = 0; i < kSimdWidth; ++i) on[i] = first + i < acting;
      arg(on, values + first, indices + first, value, at);
      if (first == 0) index_data[0] = at;
    }
    const I chosen = index_data[0];
    for (uint t = 0; t < count; ++t) result[t] = chosen;
  }

  // threadgroup_arg_reduce's steps region by region (threadgroup_reduce_by_regions).
  template <class T, class I, class Arg>
  void threadgroup_arg_reduce_by_regions(const bool* mask, I* result, T* arg_data, I* index_data, const T* val,
                                         const I* index_val, const uint* idx, uint size, Arg& arg) {
    T values[kMaxGroupThreads];
    I indices[kMaxGroupThreads];
    const auto combine = [&](const bool* on, uint first, const T* v, const I* index) {
      T value;
      I at;
      arg(on, v + first, index + first, value, at);
      for (uint i = 0; i < kSimdWidth; ++i) {
        if (!on[i]) continue;
        values[first + i] = value;
        indices[first + i] = at;
      }
    };
    lanes(mask, [&](const bool* on, uint first) { combine(on, first, val, index_val); });
    if (size <= kSimdWidth) {
      region(mask, [&](uint t) {
        result[t] = indices[t];
        return true;
      });
      return;
    }
    region(mask, [&](uint t) {
      if (idx[t] % kSimdWidth == 0) {
        arg_data[idx[t] / kSimdWidth] = values[t];
        index_data[idx[t] / kSimdWidth] = indices[t];
      }
      return true;
    });
    bool acting[kMaxGroupThreads];
    T read_values[kMaxGroupThreads];
    I read_indices[kMaxGroupThreads];
    std::memset(acting, 0, count_);
    region(mask, [&](uint t) {
      acting[t] = idx[t] < (size + kSimdWidth - 1) / kSimdWidth;
      if (acting[t]) {
        read_values[t] = arg_data[idx[t]];
        read_indices[t] = index_data[idx[t]];
      }
      return true;
    });
    lanes(acting, [&](const bool* on, uint first) { combine(on, first, read_values, read_indices); });
    region(acting, [&](uint t) {
      if (idx[t] == 0) index_data[0] = indices[t];
      return true;
    });
    region(mask, [&](uint t) {
      result[t] = index_data[0];
      return true;
    });
  }

  // Whether every thread runs and `mask` is all of them, each with `idx` its index: the group steps'
  // fast path.
  bool everyone_at_own_index(const bool* mask, const uint* idx) const {
    if (!everyone_ || mask != alive) return false;  // then idx of threads outside the mask was never written
    uint differ = 0;
    for (uint t = 0; t < count_; ++t) differ |= idx[t] ^ t;  // no early exit: a vector loop
    return !differ;
  }

  bool any(const bool* mask) const {
    if (everyone_ && mask == alive) return count_ > 0;
    for (uint t = 0; t < count_; ++t)
      if (mask[t] && alive[t]) return true;
    return false;
  }

  bool alive[kMaxGroupThreads];

 private:
  void leave(uint t) {
    alive[t] = false;
    everyone_ = false;
  }

  // A thread's lane record is set up where it is used (a record is a few hundred bytes: setting all of
  // them for every group cost as much as a region).
  void enter(uint t) {
    lanes_[t].info.lane = t % kSimdWidth;
    now_.fiber = &lanes_[t];
    now_.replay = &replays_[t];
    replays_[t].next = 0;
    replays_[t].pending = false;
  }

  // Each simdgroup's recording lanes combine; lanes that reached another simdgroup function (divergent
  // calls) combine with those that reached the same one, as the fiber scheduler does.
  void combine(const bool* mask) {
    for (uint first = 0; first < count_; first += kSimdWidth) {
      const uint last = count_ < first + kSimdWidth ? count_ : first + kSimdWidth;
      for (;;) {
        Fiber* lanes[kSimdWidth] = {};
        Combine op = nullptr;
        for (uint t = first; t < last; ++t) {
          if (!mask[t] || !alive[t] || !replays_[t].pending) continue;
          if (op == nullptr) op = lanes_[t].combine;
          if (lanes_[t].combine == op) lanes[t - first] = &lanes_[t];
        }
        if (op == nullptr) break;
        op(lanes);
        for (Fiber* lane : lanes) {
          if (!lane) continue;
          LaneReplay& replay = replays_[lane - lanes_];
          std::memcpy(replay.results[replay.recorded++], lane->result, kLaneBytes);
          replay.pending = false;
        }
      }
    }
  }

  Positions positions_;
  uint count_;
  bool reverse_;
  bool everyone_ = true;  // no thread has returned from the kernel
  Fiber* lanes_;
  LaneReplay* replays_;
  Executing& now_;
};

// Runs a group function's body twice over, as `body(std::bool_constant<true>)` for a group along x, where
// a thread's position is its index, which the compiler can split a loop on (`if (t < stride)`) and
// vectorise (`partial[t]`): a tree reduction in threadgroup memory 2.9 times faster; and as
// `body(std::bool_constant<false>)` for any other shape, with positions computed from the index. Only
// kernels whose thread positions are scalars (`uint t [[thread_position_in_threadgroup]]`: hand-written
// kernels) get this; Inductor's, with uint2 positions, get the general body alone: the specialised one
// gained them nothing measurable and doubled their compile time.
template <class Body>
__attribute__((always_inline)) inline void on_axis(const ThreadInfo& base, Body&& body) {
  if (base.group_size[1] == 1 && base.group_size[2] == 1) return body(std::bool_constant<true>{});
  body(std::bool_constant<false>{});
}

}  // namespace shimkit_metal
