// pooled_int8_matmul: y[m, n] = f32(sum_k q[m, k] * w[n, k]) * x_scale[m] * w_scale[n] for f32
// activations x [M, K], quantized here per row to q (x_scale[m] = max_k |x[m, k]| / 127, q = x /
// x_scale rounded half to even, as engine/model/int8.py does it in XLA), and int8 output-major weights
// w [N, K] with f32 scales: the W8A8 matmul of engine/model/int8.py as an XLA CPU custom call (see
// engine/model/kernels/__init__.py for why).
// One call takes any number of (w, w_scale) pairs against the same x and returns a y for each
// (q, k and v; gate and up): one parallel region streams all their weights.
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

#if defined(__AVX2__)
using pooled::Load32;
using pooled::Prefetch;
using pooled::Sum;
#endif

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
  Prefetch<CT>(p.w + n0 * p.depth + k * CT);  // 64 bytes of each of CT rows
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

#elif defined(__AVX2__)

// AVX2 has no byte dot into int32: vpmaddubsw multiplies unsigned by signed bytes into saturating
// 16-bit pair sums. |x| (<= 127) times w carrying x's sign stays within 2 * 127 * 127, so nothing
// saturates; vpmaddwd by ones widens the pairs to int32. (int8 weights are within +-127, as
// engine/model/int8.py quantizes them: -128 has no sign-flipped twin.)
template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[RT][CT];
  for (int i = 0; i < RT; ++i)
    for (int j = 0; j < CT; ++j) acc[i][j] = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 32 <= p.depth; k += 32) {
    Prefetch<(CT + 1) / 2>(p.w + n0 * p.depth + k * CT);  // 32 bytes of each of CT rows
    __m256i w[CT];
    for (int j = 0; j < CT; ++j) w[j] = Load32(p.w + (n0 + j) * p.depth + k);
    for (int i = 0; i < RT; ++i) {
      const __m256i x = Load32(p.x + (m0 + i) * p.depth + k);
      const __m256i magnitude = _mm256_abs_epi8(x);
      for (int j = 0; j < CT; ++j) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w[j], x));
        acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  for (int i = 0; i < RT; ++i) {
    const int8_t* x = p.x + (m0 + i) * p.depth;
    for (int j = 0; j < CT; ++j) {
      const int8_t* w = p.w + (n0 + j) * p.depth;
      int32_t sum = Sum(acc[i][j]);
      for (int64_t r = k; r < p.depth; ++r) sum += static_cast<int32_t>(x[r]) * static_cast<int32_t>(w[r]);
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

// The tiles of this file, for pooled::RunTiles.
struct Tiles {
  static constexpr int kChannelTile = 4;
  static constexpr int kRowTile = 4;
  static constexpr int64_t kChunkChannels = 16;  // 16, 32 and 64 timed alike
  static constexpr int kChannelStep = 1;

  template <int RT, int CT>
  static void Run(const Problem& p, int64_t m0, int64_t n0) {
    Tile<RT, CT>(p, m0, n0);
  }
};

// Per-row symmetric quantization, the same float operations as engine/model/int8.py's (so the same bits).
void Quantize(const float* x, int64_t rows, int64_t depth, int8_t* q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * depth;
    float peak = 0.0f;
    for (int64_t k = 0; k < depth; ++k) peak = std::max(peak, std::fabs(row[k]));
    const float s = peak * (1.0f / 127.0f);  // as engine/model/int8.py writes it (not peak / 127: 1 ulp apart)
    scale[m] = s == 0.0f ? 1.0f : s;
    const float inverse = 1.0f / scale[m];  // a product, as engine/model/int8.py's (see quantize_rows)
    for (int64_t k = 0; k < depth; ++k) q[m * depth + k] = static_cast<int8_t>(std::nearbyint(row[k] * inverse));
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
  }
  pooled::RunTiles<Tiles>(pool, problems);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledInt8Matmul, Int8Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
