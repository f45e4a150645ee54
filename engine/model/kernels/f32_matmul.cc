// pooled_f32_matmul: y = x · w for f32 x [M, K] and f32 weights w [K, N] (input-major: the
// projections, an output head) as an XLA CPU custom call, each row of y computed alone: a row's
// result never depends on how many rows the call has or where the row sits among them,
//   y[m, n] = fma(x[m, K-1], w[K-1, n], ... fma(x[m, 1], w[1, n], fma(x[m, 0], w[0, n], 0))),
// the products added in input order in every path (register tiles on the weights or on packed
// panels of them, rows streamed through y, the
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

// The vector operations of the machine the library is built for: `kWidth` floats a vector.
#if defined(__AVX512F__)
struct Lanes {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* from) { return _mm512_loadu_ps(from); }
  static void Store(float* to, V v) { _mm512_storeu_ps(to, v); }
  static V Splat(float x) { return _mm512_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
constexpr int kTileRows = 8;  // 8 rows by 32 channels: 16 accumulators, 2 weights, 1 input
constexpr int kTileChannels = 32;
#elif defined(__AVX2__) && defined(__FMA__)
struct Lanes {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* from) { return _mm256_loadu_ps(from); }
  static void Store(float* to, V v) { _mm256_storeu_ps(to, v); }
  static V Splat(float x) { return _mm256_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
constexpr int kTileRows = 6;  // 6 rows by 16 channels: 12 accumulators, 2 weights, 1 input
constexpr int kTileChannels = 16;
#else  // Portable: plain floats, which the compiler may vectorize across channels.
struct Lanes {
  using V = float;
  static constexpr int kWidth = 1;
  static V Zero() { return 0.0f; }
  static V Load(const float* from) { return *from; }
  static void Store(float* to, V v) { *to = v; }
  static V Splat(float x) { return x; }
  static V Fma(V a, V b, V c) { return std::fma(a, b, c); }
};
constexpr int kTileRows = 4;
constexpr int kTileChannels = 16;
#endif

// RT rows by CT channels (a multiple of the vector width) from weights `w` whose row k starts at
// w + k * w_stride: the weight itself at its channel n0, or a packed panel (PackedTiles).
template <int RT, int CT>
void VectorTile(const Problem& p, const float* w, int64_t w_stride, int64_t m0, int64_t n0) {
  constexpr int V = CT / Lanes::kWidth;
  Lanes::V acc[RT][V];
  for (int i = 0; i < RT; ++i)
    for (int j = 0; j < V; ++j) acc[i][j] = Lanes::Zero();
  const float* x = p.x + m0 * p.depth;
  for (int64_t k = 0; k < p.depth; ++k) {
    const float* w_row = w + k * w_stride;
    Lanes::V wk[V];
    for (int j = 0; j < V; ++j) wk[j] = Lanes::Load(w_row + Lanes::kWidth * j);
    for (int i = 0; i < RT; ++i) {
      const Lanes::V xi = Lanes::Splat(x[i * p.depth + k]);
      for (int j = 0; j < V; ++j) acc[i][j] = Lanes::Fma(xi, wk[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RT; ++i)
    for (int j = 0; j < V; ++j) Lanes::Store(p.y + (m0 + i) * p.channels + n0 + Lanes::kWidth * j, acc[i][j]);
}

// RT rows by CT channels (a multiple of the vector width, or 1 for a channel past the last tile).
template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  if constexpr (CT % Lanes::kWidth != 0) {
    for (int j = 0; j < CT; ++j) ScalarChannel<RT>(p, m0, n0 + j);
  } else {
    VectorTile<RT, CT>(p, p.w + n0, p.channels, m0, n0);
  }
}

// Every row of p for channels [n0, n1), the sums kept in y: the weight's rows stream through in
// order, D at a time into each vector of y (see kStreamRows); the channels past the last whole
// vector one at a time, the same multiply-adds.
template <int D>
void StreamStep(const Problem& p, int64_t k, int64_t n0, int64_t n1) {
  const float* w_rows = p.w + k * p.channels;
  int64_t n = n0;
  for (; n + Lanes::kWidth <= n1; n += Lanes::kWidth) {
    Lanes::V w[D];
    for (int d = 0; d < D; ++d) w[d] = Lanes::Load(w_rows + d * p.channels + n);
    for (int64_t m = 0; m < p.rows; ++m) {
      float* y = p.y + m * p.channels + n;
      const float* x = p.x + m * p.depth + k;
      Lanes::V sum = Lanes::Load(y);
      for (int d = 0; d < D; ++d) sum = Lanes::Fma(Lanes::Splat(x[d]), w[d], sum);
      Lanes::Store(y, sum);
    }
  }
  for (; n < n1; ++n) {
    for (int64_t m = 0; m < p.rows; ++m) {
      float& y = p.y[m * p.channels + n];
      for (int d = 0; d < D; ++d) y = std::fma(p.x[m * p.depth + k + d], w_rows[d * p.channels + n], y);
    }
  }
}

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

// From this many rows the weights are first packed into panels of kTileChannels channels, each
// panel's rows contiguous ([depth][kTileChannels]), and the tiles read the panels: a tile then
// walks its weights in address order (the prefetcher follows it), where the unpacked weights are
// read kTileChannels channels at a time down rows `channels` apart. Work is shared out by blocks
// of kBlockRows rows by kBlockPanels panels, so a block's inputs stay in the core's cache while
// its panels go by. The multiply-adds, and the order each sum takes them in, are Tile's.
constexpr int64_t kPackRows = 64;
constexpr int64_t kBlockRows = 96;
constexpr int64_t kBlockPanels = 4;

// The last `rows` rows of a block (fewer than kTileRows) as one tile on a packed panel.
template <int RT>
void PanelRows(const Problem& p, const float* panel, int64_t m0, int64_t n0, int64_t rows) {
  if constexpr (RT > 0) {
    if (rows == RT) {
      VectorTile<RT, kTileChannels>(p, panel, kTileChannels, m0, n0);
    } else {
      PanelRows<RT - 1>(p, panel, m0, n0, rows);
    }
  }
}

// Every problem's whole panels packed, then its rows × panels in blocks; the channels past the
// last whole panel go through Tile on the unpacked weights.
void PackedTiles(ffi::ThreadPool& pool, const std::vector<Problem>& problems) {
  struct Block {
    size_t problem;
    int64_t m0, panel0;
  };
  std::vector<std::vector<float>> panels(problems.size());
  std::vector<Block> blocks;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    const int64_t whole = p.channels / kTileChannels;
    panels[i].resize(whole * p.depth * kTileChannels);
    for (int64_t panel = 0; panel < whole; ++panel)
      for (int64_t k = 0; k < p.depth; ++k)
        std::copy_n(p.w + k * p.channels + panel * kTileChannels, kTileChannels,
                    panels[i].data() + (panel * p.depth + k) * kTileChannels);
    for (int64_t m0 = 0; m0 < p.rows; m0 += kBlockRows)
      for (int64_t panel0 = 0; panel0 * kTileChannels < p.channels; panel0 += kBlockPanels)
        blocks.push_back(Block{i, m0, panel0});
  }
  pooled::ForEachUnit(pool, static_cast<int64_t>(blocks.size()), true, [&](int64_t unit) {
    const Block& b = blocks[unit];
    const Problem& p = problems[b.problem];
    const int64_t m1 = std::min(b.m0 + kBlockRows, p.rows);
    const int64_t whole = p.channels / kTileChannels;
    for (int64_t panel = b.panel0; panel < std::min(b.panel0 + kBlockPanels, whole); ++panel) {
      const float* packed = panels[b.problem].data() + panel * p.depth * kTileChannels;
      int64_t m0 = b.m0;
      for (; m0 + kTileRows <= m1; m0 += kTileRows)
        VectorTile<kTileRows, kTileChannels>(p, packed, kTileChannels, m0, panel * kTileChannels);
      PanelRows<kTileRows - 1>(p, packed, m0, panel * kTileChannels, m1 - m0);
    }
    if (b.panel0 + kBlockPanels > whole) {  // this block holds the channels past the last panel
      for (int64_t m0 = b.m0; m0 < m1; ++m0)
        for (int64_t n = whole * kTileChannels; n < p.channels; ++n) Tile<1, 1>(p, m0, n);
    }
  });
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
  } else if (x.dimensions()[0] >= kPackRows && Lanes::kWidth > 1) {
    PackedTiles(pool, problems);
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
