// Splitting a kernel's work across XLA's CPU thread pool.
//
// Threads: XLA calls a handler on one of its threads. `ForEachUnit` schedules helpers on XLA's
// intra-op pool; the caller and the helpers take units from one atomic counter, so the work
// completes even when a helper starts late or never (a pool of one runs scheduled tasks inline).
// The caller returns once every unit is done; the shared state lives until the last helper lets
// go of it, so a helper that starts after the call returned finds no units and only drops it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace pooled {

inline void Relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Runs body(unit) for every unit in [0, units): on the calling thread alone when `parallel` is
// false (too little work to be worth waking a helper), else shared with the pool's threads.
template <typename Body>
void ForEachUnit(xla::ffi::ThreadPool& pool, int64_t units, bool parallel, const Body& body) {
  const int64_t helpers = parallel ? std::min<int64_t>(pool.num_threads() - 1, units - 1) : 0;
  if (helpers <= 0) {
    for (int64_t unit = 0; unit < units; ++unit) body(unit);
    return;
  }
  struct Shared {
    const Body* body;
    int64_t units;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};

    void Run() {
      for (int64_t unit = next.fetch_add(1); unit < units; unit = next.fetch_add(1)) {
        (*body)(unit);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };
  // `body` outlives every unit: the caller waits for all of them before returning.
  auto shared = std::make_shared<Shared>();
  shared->body = &body;
  shared->units = units;
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([shared] { shared->Run(); });
  shared->Run();
  while (shared->done.load(std::memory_order_acquire) < units) Relax();
}

}  // namespace pooled
