// Splitting a matmul kernel's work into tiles and across XLA's CPU thread pool.
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
#include <vector>

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

// Below this many multiply-adds a helper costs more to wake than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 16;

// Kernel::Run<RT, CT>(p, m0, n0) for the last `rows` rows of p (fewer than Kernel::kRowTile) as
// one tile of RT rows.
template <typename Kernel, int CT, int RT, typename Problem>
void RemainingRows(const Problem& p, int64_t m0, int64_t n0, int64_t rows) {
  if constexpr (RT > 0) {
    if (rows == RT) {
      Kernel::template Run<RT, CT>(p, m0, n0);
    } else {
      RemainingRows<Kernel, CT, RT - 1>(p, m0, n0, rows);
    }
  }
}

// Kernel::Run<RT, CT>(p, m0, n0) over every row of `p` for channels n0 .. n0 + CT: tiles of
// Kernel::kRowTile rows, then one tile of the remaining rows.
template <typename Kernel, int CT, typename Problem>
void ChannelTile(const Problem& p, int64_t n0) {
  int64_t m0 = 0;
  for (; m0 + Kernel::kRowTile <= p.rows; m0 += Kernel::kRowTile) Kernel::template Run<Kernel::kRowTile, CT>(p, m0, n0);
  RemainingRows<Kernel, CT, Kernel::kRowTile - 1>(p, m0, n0, p.rows - m0);
}

// Runs body(p, n0, end) for every problem p's output channels in chunks [n0, end) of
// `chunk_channels`: one parallel region for all the weights of a call. A Problem has `rows`,
// `channels` and `depth`.
template <typename Problem, typename Body>
void ForEachChunk(xla::ffi::ThreadPool& pool, const std::vector<Problem>& problems, int64_t chunk_channels,
                  const Body& body) {
  std::vector<int64_t> first_chunk{0};  // problem i owns chunks [first_chunk[i], first_chunk[i + 1])
  int64_t work = 0;
  for (const Problem& p : problems) {
    first_chunk.push_back(first_chunk.back() + (p.channels + chunk_channels - 1) / chunk_channels);
    work += p.rows * p.channels * p.depth;
  }
  ForEachUnit(pool, first_chunk.back(), work >= kParallelWork, [&](int64_t chunk) {
    const size_t i = std::upper_bound(first_chunk.begin(), first_chunk.end(), chunk) - first_chunk.begin() - 1;
    const Problem& p = problems[i];
    const int64_t n0 = (chunk - first_chunk[i]) * chunk_channels;
    body(p, n0, std::min(n0 + chunk_channels, p.channels));
  });
}

// Runs every problem's tiles (Kernel::Run<RT, CT>, RT <= Kernel::kRowTile rows by CT channels:
// tiles of Kernel::kChannelTile, then of Kernel::kChannelStep for the rest, which
// Kernel::kChunkChannels and every problem's channels are multiples of) over its output channels
// in chunks of Kernel::kChunkChannels.
template <typename Kernel, typename Problem>
void RunTiles(xla::ffi::ThreadPool& pool, const std::vector<Problem>& problems) {
  ForEachChunk(pool, problems, Kernel::kChunkChannels, [](const Problem& p, int64_t n0, int64_t end) {
    for (; n0 + Kernel::kChannelTile <= end; n0 += Kernel::kChannelTile) ChannelTile<Kernel, Kernel::kChannelTile>(p, n0);
    for (; n0 < end; n0 += Kernel::kChannelStep) ChannelTile<Kernel, Kernel::kChannelStep>(p, n0);
  });
}

}  // namespace pooled
