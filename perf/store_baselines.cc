/* SPDX-License-Identifier: MIT */
// Baselines for the durable store's figures, measured in the same run on the same disk:
//   - raw append: one thread pwrites 144-byte records (a 16-byte key and a 64-byte payload behind a
//     64-byte header, the size of the store's PUT record) into a file written with zeros to its
//     size first, as the journal's segments are, with one fdatasync per k records. k = 1 is what
//     one SYNC_EACH put alone can cost at best; k = 64 is the best a group commit serving 64
//     waiting threads can do; k = 4096 is a bulk append (the 8.4 M records/s for 48-byte
//     records). No checksum, no index, no threads: the disk and the system calls only.
//   - runtime lateness: the store's lateness workload (20 000 timers due at random over 2 s, put well
//     ahead, one worker, 1 ms tick) on the bare runtime with schedule_at, CLOCK_MONOTONIC.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "chime.h"
#include "harness.h"

namespace perf {
namespace {

constexpr uint64_t kMs = 1000000, kSec = 1000 * kMs;
constexpr size_t kRecord = 144;

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * kSec + uint64_t(ts.tv_nsec);
}

// Args: records per fdatasync. The file is written with zeros first (so an fdatasync logs no new
// size and no conversion of unwritten extents, which a fallocate'd file costs: docs/perf.md);
// records are copied into a buffer and the buffer pwritten at each sync point or when 1 MiB is full.
void BM_store_raw_append(benchmark::State &st) {
  const uint64_t per_sync = uint64_t(st.range(0));
  const bool quick = g_opt.mode == Mode::quick, full = g_opt.mode == Mode::full;
  uint64_t total = per_sync == 1 ? (quick ? 500 : 4000) : per_sync == 64 ? (quick ? 20000 : full ? 400000 : 100000)
                                                                          : (quick ? 400000 : 4000000);
  total -= total % per_sync;
  const char *base = getenv("CHIME_PERF_STORE_DIR");
  if (!base || !*base) base = getenv("TMPDIR");
  std::string path = std::string(base && *base ? base : "/tmp") + "/chime-perf-raw-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back(0);
  for (auto _ : st) {
    int fd = mkstemp(name.data());
    if (fd < 0) return (void)fail(st, "raw append: mkstemp");
    unlink(name.data());
    std::vector<char> buf(1 << 20);  // zeros first: the file is written to its size
    bool zeroed = true;
    for (uint64_t at = 0; at < total * kRecord && zeroed; at += buf.size()) {
      size_t n = size_t(std::min<uint64_t>(buf.size(), total * kRecord - at));
      zeroed = pwrite(fd, buf.data(), n, off_t(at)) == ssize_t(n);
    }
    if (!zeroed || fdatasync(fd)) {
      close(fd);
      return (void)fail(st, "raw append: writing the file's zeros");
    }
    unsigned char rec[kRecord] = {1, 2, 3};
    std::vector<uint64_t> sync_ns;
    uint64_t off = 0, used = 0;
    bool bad = false;
    uint64_t t0 = mono_ns();
    for (uint64_t i = 0; i < total; i++) {
      std::memcpy(rec + 64, &i, sizeof i);  // the record differs from the last (a key)
      std::memcpy(buf.data() + used, rec, kRecord);
      used += kRecord;
      bool sync = (i + 1) % per_sync == 0;
      if (sync || used + kRecord > buf.size()) {
        bad |= pwrite(fd, buf.data(), used, off_t(off)) != ssize_t(used);
        off += used, used = 0;
      }
      if (sync) {
        uint64_t s0 = mono_ns();
        bad |= fdatasync(fd) != 0;
        sync_ns.push_back(mono_ns() - s0);
      }
    }
    double secs = double(mono_ns() - t0) / 1e9;
    close(fd);
    if (bad) return (void)fail(st, "raw append: a write or fdatasync failed");
    st.SetIterationTime(secs);
    std::sort(sync_ns.begin(), sync_ns.end());
    std::string k = "store_raw_append_" + std::to_string(per_sync);
    std::string what = "raw baseline: 144-byte records pwritten, one fdatasync per " + std::to_string(per_sync) + ": ";
    note(st, k + "_kps", what + "records (k/s)", double(total) / secs / 1e3);
    note(st, k + "_fdatasync_p50_us", what + "fdatasync p50 (us)", double(sync_ns[sync_ns.size() / 2]) / 1e3);
  }
  st.SetItemsProcessed(int64_t(st.iterations() * total));
}

struct Shot {
  uint64_t deadline, fired;
  std::atomic<uint64_t> *count;
};

void shot(void *p) {
  Shot *s = static_cast<Shot *>(p);
  s->fired = mono_ns();
  s->count->fetch_add(1, std::memory_order_release);
}

// The store's lateness workload on the runtime alone: n timers due at random over 2 s from 500 ms
// on, scheduled at once, one worker, 1 ms tick. Lateness: callback start minus deadline.
void BM_store_runtime_lateness(benchmark::State &st) {
  const uint64_t n = g_opt.mode == Mode::quick ? 2000 : 20000;
  std::vector<Shot> s(n);
  for (auto _ : st) {
    chime_timer_config cfg{};
    cfg.workers = 1;
    chime_timer *t = nullptr;
    if (chime_timer_new(&t, &cfg)) return (void)fail(st, "runtime lateness: chime_timer_new");
    std::atomic<uint64_t> count{0};
    uint64_t start = mono_ns() + 500 * kMs;
    for (uint64_t i = 0; i < n; i++) {
      s[i] = Shot{start + (i * 0x9e3779b97f4a7c15u) % (2 * kSec), 0, &count};
      if (chime_timer_schedule_at(t, s[i].deadline, shot, &s[i], nullptr)) {
        chime_timer_free(t);
        return (void)fail(st, "runtime lateness: schedule failed");
      }
    }
    while (count.load(std::memory_order_acquire) < n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    chime_timer_free(t);
    std::vector<uint64_t> late(n);
    for (uint64_t i = 0; i < n; i++) {
      if (s[i].fired < s[i].deadline) return (void)fail(st, "runtime lateness: a timer fired early");
      late[i] = s[i].fired - s[i].deadline;
    }
    std::sort(late.begin(), late.end());
    st.SetIterationTime(2.5);
    const std::string what = "baseline: the runtime alone, the same " + count_name(int64_t(n)) + " timers over 2 s, ";
    note(st, "store_runtime_lateness_p50_us", what + "p50 (us)", double(late[n / 2]) / 1e3);
    note(st, "store_runtime_lateness_p99_us", what + "p99 (us)", double(late[n * 99 / 100]) / 1e3);
    note(st, "store_runtime_lateness_max_us", what + "max (us)", double(late.back()) / 1e3);
  }
}

}  // namespace

void register_store_baselines() {
  const unsigned once = kManualTime | kOnce | kMillis;
  add("BM_store_raw_append", {"per_sync"}, {1}, BM_store_raw_append, once);
  add("BM_store_raw_append", {"per_sync"}, {64}, BM_store_raw_append, once);
  add("BM_store_raw_append", {"per_sync"}, {4096}, BM_store_raw_append, once);
  add("BM_store_runtime_lateness", {}, {}, BM_store_runtime_lateness, once);
}

}  // namespace perf
