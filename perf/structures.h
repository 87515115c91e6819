/* SPDX-License-Identifier: MIT */
// The single-threaded timer structures chime-perf compares, behind one static interface, and the
// setup every workload shares. Each structure is called directly, one out-of-line call per operation:
// the wheel through the shared library (as users call it), the baselines through their static
// archive; no function table.
//
// A structure S has: T (the structure), Handle (what the caller keeps per timer: an id, or for an
// intrusive structure the timer struct itself, owned by the caller), kName, kIntrusive, kSortedFill,
// and create/destroy/schedule/cancel/advance/pending. cancel returns -ENOENT for a timer that is not
// pending (fired, cancelled): the churn workload relies on it.
#ifndef CHIME_PERF_STRUCTURES_H
#define CHIME_PERF_STRUCTURES_H

#include <algorithm>
#include <cstdint>
#include <vector>

#include "chime.h"
#include "harness.h"
#include "heap.h"
#include "iheap.h"
#include "list.h"

namespace perf {

constexpr uint64_t kRange = uint64_t{1} << 20;  // R: deadlines are uniform over (now, now + R]
constexpr uint64_t kStart = uint64_t{1} << 40;  // the structures' start time, in ms ticks

// What every callback does: count, so that a firing cannot be optimised away.
inline uint64_t g_fired;
inline void on_fire(void *) { g_fired++; }

struct Wheel {
  using T = chime_wheel;
  using Handle = uint64_t;
  static constexpr const char *kName = "wheel";
  static constexpr bool kIntrusive = false, kSortedFill = false;
  static Handle handle() { return 0; }
  static T *create(uint64_t start) {
    chime_wheel_config cfg{};  // levels 0: CHIME_LAYOUT_MILLISECONDS
    cfg.start = start;
    chime_wheel *w = nullptr;
    return chime_wheel_new(&w, &cfg) ? nullptr : w;
  }
  static void destroy(T *t) { chime_wheel_free(t, nullptr); }
  static int schedule(T *t, uint64_t d, Handle &h) { return chime_wheel_schedule(t, d, on_fire, nullptr, &h); }
  static int cancel(T *t, Handle &h) { return chime_wheel_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return chime_wheel_advance(t, now); }
  static size_t pending(const T *t) { return chime_wheel_pending(t); }
};

// The tuned intrusive heap (iheap.h): "heap" is the arity the project keeps, the other one is
// measured in full runs only, to show why.
template <unsigned kArity>
struct IHeap {
  using T = perf_iheap;
  using Handle = perf_iheap_timer;
  static constexpr const char *kName = kArity == PERF_IHEAP_ARITY ? "heap" : kArity == 2 ? "heap_2ary" : "heap_4ary";
  static constexpr bool kIntrusive = true, kSortedFill = false;
  static Handle handle() { return PERF_IHEAP_TIMER_INIT; }
  static T *create(uint64_t start) { return perf_iheap_new(start, 0, kArity); }
  static void destroy(T *t) { perf_iheap_free(t); }
  static int schedule(T *t, uint64_t d, Handle &h) { return perf_iheap_schedule(t, &h, d, on_fire, nullptr); }
  static int cancel(T *t, Handle &h) { return perf_iheap_cancel(t, &h); }
  static size_t advance(T *t, uint64_t now) { return perf_iheap_advance(t, now); }
  static size_t pending(const T *t) { return perf_iheap_pending(t); }
};
using Heap = IHeap<PERF_IHEAP_ARITY>;
using HeapOtherArity = IHeap<6 - PERF_IHEAP_ARITY>;

// The binary heap with generation-checked ids (heap.h): what the heap pays for chime's kind of ids.
struct IdHeap {
  using T = perf_heap;
  using Handle = uint64_t;
  static constexpr const char *kName = "idheap";
  static constexpr bool kIntrusive = false, kSortedFill = false;
  static Handle handle() { return 0; }
  static T *create(uint64_t start) { return perf_heap_new(start, 0); }
  static void destroy(T *t) { perf_heap_free(t); }
  static int schedule(T *t, uint64_t d, Handle &h) { return perf_heap_schedule(t, d, on_fire, nullptr, &h); }
  static int cancel(T *t, Handle &h) { return perf_heap_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return perf_heap_advance(t, now); }
  static size_t pending(const T *t) { return perf_heap_pending(t); }
};

struct List {
  using T = perf_list;
  using Handle = uint64_t;
  static constexpr const char *kName = "list";
  static constexpr bool kIntrusive = false;
  // Setting up N random timers would walk O(N^2) links: set up in deadline order (O(1) each), into
  // slots whose order Bed::settle() has shuffled, which builds the list random order would build in a
  // fresh structure: list order and memory order a random permutation of each other.
  static constexpr bool kSortedFill = true;  // (and Bed::settle() always shuffles for the list)
  static Handle handle() { return 0; }
  static T *create(uint64_t start) { return perf_list_new(start, 0); }
  static void destroy(T *t) { perf_list_free(t); }
  static int schedule(T *t, uint64_t d, Handle &h) { return perf_list_schedule(t, d, on_fire, nullptr, &h); }
  static int cancel(T *t, Handle &h) { return perf_list_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return perf_list_advance(t, now); }
  static size_t pending(const T *t) { return perf_list_pending(t); }
};

constexpr int64_t kListMax = 100000;  // the list's O(n) schedule takes seconds past this

// N deadline offsets uniform over [1, R], and the same sorted. Each batch draws new ones (untimed):
// replaying one sequence lets the branch predictor learn it, which at N = 10^3 made the heap's
// comparisons look three times cheaper than they are. Same seeds, so the same draws, per structure.
struct Offsets {
  std::vector<uint64_t> random, sorted;
  Rng rng;
  explicit Offsets(size_t n) : random(n), rng(0x5eed0000 + n) { redraw(); }
  void redraw() {
    for (auto &o : random) o = 1 + rng.below(kRange);
    sorted = random;
    std::sort(sorted.begin(), sorted.end());
  }
};

// Schedule one timer per offset at now + offset; handles[i] gets the i-th one.
template <class S>
bool fill(typename S::T *t, uint64_t now, const Offsets &o, std::vector<typename S::Handle> &handles) {
  const auto &off = S::kSortedFill ? o.sorted : o.random;
  bool ok = true;
  for (size_t i = 0; i < off.size(); i++) ok &= S::schedule(t, now + off[i], handles[i]) == 0;
  return ok;
}

}  // namespace perf

#endif  // CHIME_PERF_STRUCTURES_H
