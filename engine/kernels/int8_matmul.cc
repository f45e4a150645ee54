// pooled_int8_matmul: y[m, n] = f32(sum_k q[m, k] * w[n, k]) * x_scale[m] * w_scale[n] for f32
// activations x [M, K], quantized here per row to q (x_scale[m] = max_k |x[m, k]| / 127, q = x /
// x_scale rounded half to even, as engine/int8.py does it in XLA), and int8 output-major weights
// w [N, K] with f32 scales: the W8A8 matmul of engine/int8.py as an XLA CPU custom call (see
// engine/kernels/__init__.py for why).
// One call takes any number of (w, w_scale) pairs against the same x and returns a y for each
// (q, k and v; gate and up): one parallel region streams all their weights.
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
  const int8_t* x;
  const float* x_scale;
  const int8_t* w;
  const float* w_scale;
  float* y;
  int64_t rows;
  int64_t channels;
  int64_t depth;
};

constexpr int64_t kRowTile = 4;
constexpr int64_t kChannelTile = 4;
// Channels per unit of work taken from the shared counter (16, 32 and 64 timed alike).
constexpr int64_t kChunkChannels = 16;
// Below this many multiply-adds a helper costs more to wake than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 16;
// How far ahead of the tile being read weights are prefetched (into L2). A tile's rows are short (a
// few hundred bytes each), too short for the hardware prefetcher to ramp up on. One-row decode step
// of the default model (w8a8), scratch timing: no prefetch 13.5 ms for the projections alone;
// whole step 8.9-9.0 ms prefetching 1 KiB ahead into L1, 8.1-8.3 with 4 KiB, 7.7-8.0 with 16 KiB,
// 7.5-7.7 with 16 KiB into L2, 8.0-8.2 with 32 KiB into L2.
constexpr int64_t kPrefetchBytes = 16384;

inline float Scaled(int32_t sum, float x_scale, float w_scale) {
  // The same order as the XLA path: (f32(sum) * row scale) * channel scale.
  return static_cast<float>(sum) * x_scale * w_scale;
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)

// vpdpbusd multiplies unsigned by signed bytes: x + 128 is unsigned, and the 128 * sum(w) it adds
// is taken off at the end.
template <int RT, int CT>
inline void Step(const Problem& p, int64_t m0, int64_t n0, int64_t k, __mmask64 mask,
                 __m512i (&acc)[RT][CT], __m512i (&w_sum)[CT]) {
  const __m512i shift = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i w[CT];
  // The tile's CT rows are contiguous: CT lines per step keeps pace with the loads.
  const int8_t* ahead = p.w + n0 * p.depth + k * CT + kPrefetchBytes;
  for (int j = 0; j < CT; ++j) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * j), _MM_HINT_T1);
  for (int j = 0; j < CT; ++j) {
    w[j] = _mm512_maskz_loadu_epi8(mask, p.w + (n0 + j) * p.depth + k);
    w_sum[j] = _mm512_dpbusd_epi32(w_sum[j], ones, w[j]);
  }
  for (int i = 0; i < RT; ++i) {
    // Masked-off lanes load 0 and become 128, against weights loaded as 0.
    __m512i x = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, p.x + (m0 + i) * p.depth + k), shift);
    for (int j = 0; j < CT; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x, w[j]);
  }
}

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  __m512i acc[RT][CT];
  __m512i w_sum[CT];
  for (int j = 0; j < CT; ++j) {
    w_sum[j] = _mm512_setzero_si512();
    for (int i = 0; i < RT; ++i) acc[i][j] = _mm512_setzero_si512();
  }
  int64_t k = 0;
  for (; k + 64 <= p.depth; k += 64) Step<RT, CT>(p, m0, n0, k, ~__mmask64{0}, acc, w_sum);
  if (k < p.depth) Step<RT, CT>(p, m0, n0, k, (__mmask64{1} << (p.depth - k)) - 1, acc, w_sum);
  for (int j = 0; j < CT; ++j) {
    const int32_t correction = 128 * _mm512_reduce_add_epi32(w_sum[j]);
    for (int i = 0; i < RT; ++i) {
      const int32_t sum = _mm512_reduce_add_epi32(acc[i][j]) - correction;
      p.y[(m0 + i) * p.channels + n0 + j] = Scaled(sum, p.x_scale[m0 + i], p.w_scale[n0 + j]);
    }
  }
}

#else  // Portable: plain loops the compiler vectorizes for the machine it builds on.

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  for (int i = 0; i < RT; ++i) {
    const int8_t* x = p.x + (m0 + i) * p.depth;
    for (int j = 0; j < CT; ++j) {
      const int8_t* w = p.w + (n0 + j) * p.depth;
      int32_t sum = 0;
      for (int64_t k = 0; k < p.depth; ++k) sum += static_cast<int32_t>(x[k]) * static_cast<int32_t>(w[k]);
      p.y[(m0 + i) * p.channels + n0 + j] = Scaled(sum, p.x_scale[m0 + i], p.w_scale[n0 + j]);
    }
  }
}

#endif

template <int CT>
void ChannelTile(const Problem& p, int64_t n0) {
  int64_t m0 = 0;
  for (; m0 + kRowTile <= p.rows; m0 += kRowTile) Tile<kRowTile, CT>(p, m0, n0);
  switch (p.rows - m0) {
    case 3: Tile<3, CT>(p, m0, n0); break;
    case 2: Tile<2, CT>(p, m0, n0); break;
    case 1: Tile<1, CT>(p, m0, n0); break;
    default: break;
  }
}

void Channels(const Problem& p, int64_t begin, int64_t end) {
  int64_t n0 = begin;
  for (; n0 + kChannelTile <= end; n0 += kChannelTile) ChannelTile<kChannelTile>(p, n0);
  for (; n0 < end; ++n0) ChannelTile<1>(p, n0);
}

// Per-row symmetric quantization, the same float operations as engine/int8.py's (so the same bits).
void Quantize(const float* x, int64_t rows, int64_t depth, int8_t* q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * depth;
    float peak = 0.0f;
    for (int64_t k = 0; k < depth; ++k) peak = std::max(peak, std::fabs(row[k]));
    const float s = peak / 127.0f;
    scale[m] = s == 0.0f ? 1.0f : s;
    for (int64_t k = 0; k < depth; ++k) q[m * depth + k] = static_cast<int8_t>(std::nearbyint(row[k] / scale[m]));
  }
}

ffi::Error Int8Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights,
                      ffi::RemainingRets ys) {
  if (x.dimensions().size() != 2 || weights.size() % 2 != 0 || weights.size() / 2 != ys.size()) {
    return ffi::Error::InvalidArgument("pooled_int8_matmul: expected x [M, K] and (w [N, K], scale [N]) pairs");
  }
  const int64_t rows = x.dimensions()[0], depth = x.dimensions()[1];
  std::vector<int8_t> q(rows * depth);
  std::vector<float> x_scale(rows);
  Quantize(x.typed_data(), rows, depth, q.data(), x_scale.data());
  std::vector<Problem> problems;
  std::vector<int64_t> first_chunk{0};  // problem i owns chunks [first_chunk[i], first_chunk[i + 1])
  int64_t work = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    auto w = weights.get<ffi::Buffer<ffi::S8>>(2 * i);
    auto w_scale = weights.get<ffi::Buffer<ffi::F32>>(2 * i + 1);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (!w.has_value() || !w_scale.has_value() || !y.has_value() || w->dimensions().size() != 2 ||
        w->dimensions()[1] != depth) {
      return ffi::Error::InvalidArgument("pooled_int8_matmul: a weight is not int8 [N, K] with f32 scales");
    }
    problems.push_back(Problem{q.data(), x_scale.data(), w->typed_data(), w_scale->typed_data(), (*y)->typed_data(),
                               rows, w->dimensions()[0], depth});
    const Problem& p = problems.back();
    first_chunk.push_back(first_chunk.back() + (p.channels + kChunkChannels - 1) / kChunkChannels);
    work += p.rows * p.channels * p.depth;
  }
  pooled::ForEachUnit(pool, first_chunk.back(), work >= kParallelWork, [&](int64_t chunk) {
    const size_t i = std::upper_bound(first_chunk.begin(), first_chunk.end(), chunk) - first_chunk.begin() - 1;
    const int64_t begin = (chunk - first_chunk[i]) * kChunkChannels;
    Channels(problems[i], begin, std::min(begin + kChunkChannels, problems[i].channels));
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledInt8Matmul, Int8Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
