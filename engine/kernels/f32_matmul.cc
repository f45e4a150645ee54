// pooled_f32_matmul: y = x · w for f32 x [M, K] and f32 weights w [K, N] (input-major: the
// projections, an output head) as an XLA CPU custom call, each row of y computed alone: a row's
// result never depends on how many rows the call has or where the row sits among them,
//   y[m, n] = fma(x[m, K-1], w[K-1, n], ... fma(x[m, 1], w[1, n], fma(x[m, 0], w[0, n], 0))),
// the products added in input order in every path (register tiles, rows streamed through y, the
// scalar channels past the last whole tile, the portable loops).
//
// Why: XLA's own dot picks its blocking of the inputs, and with it the order in which a row's
// products are added, by the number of rows (on a Zen 4 core: one order for one row, another for
// 2 to 32, a third from 48). The same prompt prefilled in one chunk or in two (after a prefix-cache
// hit), or a decode step beside other streams, then rounds apart, and a seeded or greedy request
// stops being reproducible. The channels sit side by side in the vector lanes and each row's
// inputs are broadcast one at a time, so no sum is ever split across lanes.
// One call takes any number of weights against the same x and returns a y for each (q, k and v;
// gate and up): one parallel region streams all their weights.
// Threads: chunks of output channels are shared with XLA's pool (parallel.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vector_ops.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Problem {
  const float* x;  // [rows, depth]
  const float* w;  // [depth, channels]
  float* y;        // [rows, channels]
  int64_t rows;
  int64_t channels;
  int64_t depth;
};

// One channel at a time: the scalar form of every path's function. The rows' sums advance side by
// side, RT chains of multiply-adds in flight rather than one: RMSNorm's sum of squares (a
// one-channel weight), 61 norms of 512 rows, took 34 ms one row after another, 24 ms side by side
// (XLA's own reduction 13-15 ms, in an order that depends on the rows).
template <int RT>
void ScalarChannel(const Problem& p, int64_t m0, int64_t n) {
  float acc[RT] = {};
  const float* x = p.x + m0 * p.depth;
  for (int64_t k = 0; k < p.depth; ++k) {
    const float w = p.w[k * p.channels + n];
    for (int i = 0; i < RT; ++i) acc[i] = std::fma(x[i * p.depth + k], w, acc[i]);
  }
  for (int i = 0; i < RT; ++i) p.y[(m0 + i) * p.channels + n] = acc[i];
}

#if defined(__AVX512F__)

// RT rows by CT channels (a multiple of 16, or 1 for a channel past the last tile).
template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  if constexpr (CT % 16 != 0) {
    for (int j = 0; j < CT; ++j) ScalarChannel<RT>(p, m0, n0 + j);
  } else {
    constexpr int V = CT / 16;
    __m512 acc[RT][V];
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < V; ++j) acc[i][j] = _mm512_setzero_ps();
    const float* x = p.x + m0 * p.depth;
    for (int64_t k = 0; k < p.depth; ++k) {
      const float* w_row = p.w + k * p.channels + n0;
      __m512 w[V];
      for (int j = 0; j < V; ++j) w[j] = _mm512_loadu_ps(w_row + 16 * j);
      for (int i = 0; i < RT; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i * p.depth + k]);
        for (int j = 0; j < V; ++j) acc[i][j] = _mm512_fmadd_ps(xi, w[j], acc[i][j]);
      }
    }
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < V; ++j) _mm512_storeu_ps(p.y + (m0 + i) * p.channels + n0 + 16 * j, acc[i][j]);
  }
}

constexpr int kTileRows = 8;       // 8 rows by 32 channels: 16 accumulators, 2 weights, 1 input
constexpr int kTileChannels = 32;

// Every row of p for channels [n0, n1), the sums kept in y: the weight's rows stream through in
// order, D at a time into each vector of y (see kStreamRows).
template <int D>
void StreamStep(const Problem& p, int64_t k, int64_t n0, int64_t n1) {
  const float* w_rows = p.w + k * p.channels;
  for (int64_t n = n0; n < n1; n += 16) {
    const __mmask16 mask = n1 - n >= 16 ? __mmask16{0xFFFF} : (__mmask16{1} << (n1 - n)) - 1;
    __m512 w[D];
    for (int d = 0; d < D; ++d) w[d] = _mm512_maskz_loadu_ps(mask, w_rows + d * p.channels + n);
    for (int64_t m = 0; m < p.rows; ++m) {
      float* y = p.y + m * p.channels + n;
      const float* x = p.x + m * p.depth + k;
      __m512 sum = _mm512_maskz_loadu_ps(mask, y);
      for (int d = 0; d < D; ++d) sum = _mm512_fmadd_ps(_mm512_set1_ps(x[d]), w[d], sum);
      _mm512_mask_storeu_ps(y, mask, sum);
    }
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  if constexpr (CT % 8 != 0) {
    for (int j = 0; j < CT; ++j) ScalarChannel<RT>(p, m0, n0 + j);
  } else {
    constexpr int V = CT / 8;
    __m256 acc[RT][V];
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < V; ++j) acc[i][j] = _mm256_setzero_ps();
    const float* x = p.x + m0 * p.depth;
    for (int64_t k = 0; k < p.depth; ++k) {
      const float* w_row = p.w + k * p.channels + n0;
      __m256 w[V];
      for (int j = 0; j < V; ++j) w[j] = _mm256_loadu_ps(w_row + 8 * j);
      for (int i = 0; i < RT; ++i) {
        const __m256 xi = _mm256_broadcast_ss(x + i * p.depth + k);
        for (int j = 0; j < V; ++j) acc[i][j] = _mm256_fmadd_ps(xi, w[j], acc[i][j]);
      }
    }
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < V; ++j) _mm256_storeu_ps(p.y + (m0 + i) * p.channels + n0 + 8 * j, acc[i][j]);
  }
}

constexpr int kTileRows = 6;  // 6 rows by 16 channels: 12 accumulators, 2 weights, 1 input
constexpr int kTileChannels = 16;

template <int D>
void StreamStep(const Problem& p, int64_t k, int64_t n0, int64_t n1) {
  const float* w_rows = p.w + k * p.channels;
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    __m256 w[D];
    for (int d = 0; d < D; ++d) w[d] = _mm256_loadu_ps(w_rows + d * p.channels + n);
    for (int64_t m = 0; m < p.rows; ++m) {
      float* y = p.y + m * p.channels + n;
      const float* x = p.x + m * p.depth + k;
      __m256 sum = _mm256_loadu_ps(y);
      for (int d = 0; d < D; ++d) sum = _mm256_fmadd_ps(_mm256_broadcast_ss(x + d), w[d], sum);
      _mm256_storeu_ps(y, sum);
    }
  }
  for (; n < n1; ++n) {
    for (int64_t m = 0; m < p.rows; ++m) {
      float& y = p.y[m * p.channels + n];
      for (int d = 0; d < D; ++d) y = std::fma(p.x[m * p.depth + k + d], w_rows[d * p.channels + n], y);
    }
  }
}

#else  // Portable: plain loops, the products of each output added in input order.

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  for (int j = 0; j < CT; ++j) ScalarChannel<RT>(p, m0, n0 + j);
}

constexpr int kTileRows = 4;
constexpr int kTileChannels = 16;

template <int D>
void StreamStep(const Problem& p, int64_t k, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < p.rows; ++m) {
    float* y = p.y + m * p.channels;
    for (int d = 0; d < D; ++d) {
      const float x = p.x[m * p.depth + k + d];
      const float* w_row = p.w + (k + d) * p.channels;
      for (int64_t n = n0; n < n1; ++n) y[n] = std::fma(x, w_row[n], y[n]);
    }
  }
}

#endif

// Up to this many rows the weights stream through StreamRows, each thread's share of the channels
// (at least kStreamChannels) a chunk: register tiles read a weight kTileChannels channels at a
// time down its rows, a stride the hardware prefetcher does not follow (a 113 MB weight at one row
// streamed at 7 GB/s that way, at 35 GB/s as XLA's own dot and StreamRows do).
constexpr int64_t kStreamRows = 4;
constexpr int64_t kStreamChannels = 256;

constexpr int kStreamDepth = 4;  // weight rows read side by side: y is loaded and stored once for 4

void StreamRows(const Problem& p, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < p.rows; ++m) std::fill(p.y + m * p.channels + n0, p.y + m * p.channels + n1, 0.0f);
  int64_t k = 0;
  for (; k + kStreamDepth <= p.depth; k += kStreamDepth) StreamStep<kStreamDepth>(p, k, n0, n1);
  for (; k < p.depth; ++k) StreamStep<1>(p, k, n0, n1);
}

// The tiles of this file, for pooled::RunTiles.
struct Tiles {
  static constexpr int kRowTile = kTileRows;
  static constexpr int64_t kChunkChannels = kTileChannels;
  static constexpr int kChannelTile = kTileChannels;
  static constexpr int kChannelStep = 1;

  template <int RT, int CT>
  static void Run(const Problem& p, int64_t m0, int64_t n0) {
    Tile<RT, CT>(p, m0, n0);
  }
};

// Every (weight, y) of a call as a Problem, or an error naming what does not fit.
ffi::Error Problems(ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights, ffi::RemainingRets ys,
                    std::vector<Problem>& problems) {
  if (x.dimensions().size() != 2 || weights.size() != ys.size()) {
    return ffi::Error::InvalidArgument("pooled_f32_matmul: expected x [M, K] and a weight per result");
  }
  const int64_t rows = x.dimensions()[0], depth = x.dimensions()[1];
  for (size_t i = 0; i < ys.size(); ++i) {
    auto w = weights.get<ffi::Buffer<ffi::F32>>(i);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (!w.has_value() || !y.has_value() || w->dimensions().size() != 2 ||
        w->dimensions()[0] != depth) {
      return ffi::Error::InvalidArgument("pooled_f32_matmul: a weight is not f32 with x's inputs");
    }
    const int64_t channels = w->dimensions()[1];
    if (static_cast<int64_t>((*y)->element_count()) != rows * channels) {
      return ffi::Error::InvalidArgument("pooled_f32_matmul: the result must be f32 [M, N]");
    }
    problems.push_back(Problem{x.typed_data(), w->typed_data(), (*y)->typed_data(), rows, channels, depth});
  }
  return ffi::Error::Success();
}

ffi::Error F32Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights,
                            ffi::RemainingRets ys) {
  std::vector<Problem> problems;
  if (ffi::Error error = Problems(x, weights, ys, problems); error.failure()) return error;
  if (x.dimensions()[0] <= kStreamRows) {
    int64_t channels = 0;
    for (const Problem& p : problems) channels += p.channels;
    const int64_t per_thread = (channels / pool.num_threads() + 15) / 16 * 16;
    pooled::ForEachChunk(pool, problems, std::max(kStreamChannels, per_thread), StreamRows);
  } else {
    pooled::RunTiles<Tiles>(pool, problems);
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledF32Matmul, F32Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
