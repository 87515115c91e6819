/* SPDX-License-Identifier: MIT */
// Memory per pending timer, as the operating system sees it: the growth of the process's resident
// anonymous memory while N timers are scheduled into a structure created for the purpose, divided by
// N, measured in a freshly executed copy of chime-perf (one per structure and N).
//
// Why this way: an allocator's statistics miss memory a structure maps itself (mmap) and count what
// it keeps cached as used; a process that has run other workloads has freed memory, grown arenas and
// raised malloc's mmap threshold. So the parent re-executes itself (`chime-perf --memory-child WHAT
// N`, with LD_BIND_NOW=1 so that no lazy symbol binding dirties a page during the measurement), and
// the child:
//   1. allocates and touches every buffer of its own (the deadlines, and for an id-based structure
//      the caller's array of ids), then has the allocator return its free pages to the system;
//   2. reads resident anonymous memory (/proc/self/statm: resident - shared, so that code pages
//      faulted in by the first calls do not count);
//   3. creates the structure and schedules N timers into it (for an intrusive structure into the
//      caller's timer structs, allocated here: they hold what the wheel's nodes hold, so they count);
//   4. has the allocator return its free pages again, reads again and prints the growth per timer.
// The threaded runtime's child does the same with N timers pending in a chime_timer
// (runtime_memory_child in runtime_bench.cc).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
#include <jemalloc/jemalloc.h>
#else
#include <malloc.h>
#endif

#include "harness.h"
#include "structures.h"

extern char **environ;

namespace perf {

size_t anon_resident_bytes() {
#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
  // Every arena's unused dirty pages back to the system (4096: MALLCTL_ARENAS_ALL).
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
#else
  malloc_trim(0);
#endif
  std::ifstream in("/proc/self/statm");
  size_t size = 0, resident = 0, shared = 0;
  in >> size >> resident >> shared;
  return (resident - shared) * size_t(sysconf(_SC_PAGESIZE));
}

namespace {

template <class S>
int structure_child(size_t n) {
  Offsets o(n);  // the driver's deadlines: allocated and touched before the first reading
  std::vector<typename S::Handle> ids, timers;
  if constexpr (!S::kIntrusive) ids.assign(n, S::handle());  // the caller's ids: the driver's
  size_t before = anon_resident_bytes();
  if constexpr (S::kIntrusive) timers.assign(n, S::handle());  // the caller's timers: the structure's
  auto *t = S::create(kStart);
  bool ok = t && fill<S>(t, kStart, o, S::kIntrusive ? timers : ids) && S::pending(t) == n;
  size_t after = anon_resident_bytes();
  if (!ok) {
    std::fprintf(stderr, "chime-perf: memory: %s did not take %zu timers\n", S::kName, n);
    return 1;
  }
  std::printf("bytes_per_timer %.3f\n", (double(after) - double(before)) / double(n));
  return 0;  // the structure is left to the exit: freeing 10^6 timers one by one would be wall time
}

// What each memory child measures, by the name the parent passes.
int dispatch(const std::string &what, size_t n) {
  if (what == Wheel::kName) return structure_child<Wheel>(n);
  if (what == Heap::kName) return structure_child<Heap>(n);
  if (what == HeapOtherArity::kName) return structure_child<HeapOtherArity>(n);
  if (what == IdHeap::kName) return structure_child<IdHeap>(n);
  if (what == List::kName) return structure_child<List>(n);
  if (what == "runtime") return runtime_memory_child(n);
  std::fprintf(stderr, "chime-perf: --memory-child: no structure '%s'\n", what.c_str());
  return 2;
}

template <class S>
void BM_memory(benchmark::State &st) {
  for (auto _ : st) {
    std::string error;
    double v = measure_in_child(S::kName, st.range(0), &error);
    if (!error.empty()) return (void)fail(st, error);
    st.counters["bytes_per_timer"] = v;
  }
}

template <class S>
void register_memory(const std::vector<int64_t> &grid) {
  for (int64_t n : grid) {
    if (std::string(S::kName) == "list" && n > kListMax) continue;
    add(std::string("BM_memory<") + S::kName + ">", {}, {n}, BM_memory<S>, kOnce);
  }
}

}  // namespace

int memory_child(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: chime-perf --memory-child STRUCTURE N\n");
    return 2;
  }
  return dispatch(argv[2], std::strtoull(argv[3], nullptr, 10));
}

double measure_in_child(const std::string &what, int64_t n, std::string *error) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    *error = "memory: cannot find chime-perf's own executable";
    return -1;
  }
  exe[len] = '\0';
  int fds[2];
  if (pipe(fds)) {
    *error = std::string("memory: pipe: ") + std::strerror(errno);
    return -1;
  }
  std::string count = std::to_string(n);
  char flag[] = "--memory-child";
  char *args[] = {exe, flag, const_cast<char *>(what.c_str()), const_cast<char *>(count.c_str()), nullptr};
  std::vector<char *> env;
  for (char **e = environ; *e; e++)
    if (std::strncmp(*e, "LD_BIND_NOW=", 12)) env.push_back(*e);
  char bind_now[] = "LD_BIND_NOW=1";
  env.push_back(bind_now);
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &actions, nullptr, args, env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    *error = std::string("memory: cannot start a child: ") + std::strerror(rc);
    return -1;
  }
  std::string out;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    out.append(buf, size_t(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  double v = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || std::sscanf(out.c_str(), "bytes_per_timer %lf", &v) != 1)
    *error = "memory: the child measuring " + what + " at N = " + count + " failed";
  return v;
}

void register_memory_benchmarks() {
  auto grid = structure_grid();
  register_memory<Wheel>(grid);
  register_memory<Heap>(grid);
  register_memory<List>(grid);
  if (g_opt.mode == Mode::full) {
    register_memory<HeapOtherArity>(grid);
    register_memory<IdHeap>(grid);
  }
}

}  // namespace perf
