// pooled_q4_matmul: the matmul of `--quantization w4a8` (engine/model/int4.py), prompts and decode steps, as
// an XLA CPU custom call: llama.cpp's Q4_1 weights against Q8 activations.
//
// Weights [N, K] come in blocks of 32 inputs: 4-bit codes c with an f16 scale d and minimum m per
// block, standing for d * c + m, in engine/model/int4.py's layout: one uint8 array per weight, each group of
// 8 channels block after block, its codes interleaved, then its 8 scales, then its 8 minimums. x f32
// [M, K] is quantized here per block of 32 inputs: s = max |x| / 127 (1 for a zero block), q = x / s
// rounded half to even, and the block's sum t = s * sum(q). Then, block by block in order,
//   y[m, n] = fma(m[n, b], t[m, b], fma(sum_k c[n, k] * q[m, k], d[n, b] * s[m, b], y[m, n])),
// the integer dot of each block exact: a row's result never depends on the other rows of the call.
// The AVX2 path computes a group's 8 channels side by side, one per 32-bit lane: 4 bytes of codes
// per channel against 4 inputs broadcast to every lane (vpmaddubsw), a block's 8 products summed in
// 16 bits (at most 8 * 2 * 15 * 127 = 30480), then widened and scaled lane by lane: no horizontal
// sums at all.
// One call takes any number of weights against the same x and returns a
// y for each (q, k and v; gate and up): one parallel region streams all their weights.
// Threads: chunks of output channels are shared with XLA's pool (parallel.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "halves.h"
#include "parallel.h"
#include "vector_ops.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pooled::HalfToFloat;

#if defined(__AVX2__)
using pooled::Load32;
using pooled::Prefetch;
#endif

constexpr int64_t kBlock = 32;  // inputs per scale and minimum
constexpr int64_t kGroup = 8;   // channels interleaved (engine/model/int4.py GROUP)
constexpr int64_t kStep = 8;    // inputs per 4 bytes of a channel's codes
constexpr int64_t kStepBytes = kGroup * kStep / 2;  // a group's codes for one step of inputs
constexpr int64_t kCodeBytes = kGroup * kBlock / 2;  // a group's codes for one block
constexpr int64_t kBlockBytes = kCodeBytes + 2 * kGroup * 2;  // and its f16 scales and minimums

struct Problem {
  const int8_t* x;         // [rows, depth], quantized per block
  const float* x_scale;    // [rows, blocks]
  const float* x_sum;      // [rows, blocks]: the block's scale times the sum of its quantized inputs
  const uint8_t* weight;   // per group of 8 channels, per block: codes, scales, minimums
  float* y;
  int64_t rows;
  int64_t channels;
  int64_t depth;

  int64_t blocks() const { return depth / kBlock; }
  // Block b of channel n's group: kCodeBytes of codes, then 8 f16 scales, then 8 f16 minimums.
  const uint8_t* block(int64_t n, int64_t b) const { return weight + (n / kGroup * blocks() + b) * kBlockBytes; }
  const uint16_t* scales(int64_t n, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(block(n, b) + kCodeBytes);
  }
  const uint16_t* mins(int64_t n, int64_t b) const { return scales(n, b) + kGroup; }
};

#if defined(__AVX2__) && defined(__F16C__)

// Inputs k .. k + 3 of a row of q, in every 32-bit lane.
inline __m256i Broadcast4(const int8_t* q) {
  int32_t four;
  std::memcpy(&four, q, sizeof four);
  return _mm256_set1_epi32(four);
}

inline __m256 LoadHalves(const uint16_t* values) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// RT rows by CT channels (CT / 8 groups), block by block.
template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  constexpr int G = CT / kGroup;
  static_assert(G * kGroup == CT, "a tile is whole groups of channels");
  const int64_t blocks = p.blocks(), group_bytes = blocks * kBlockBytes;
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[RT][G];
  for (int i = 0; i < RT; ++i)
    for (int g = 0; g < G; ++g) acc[i][g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i dots[RT][G];
    for (int i = 0; i < RT; ++i)
      for (int g = 0; g < G; ++g) dots[i][g] = _mm256_setzero_si256();
    const uint8_t* first_block = p.block(n0, b);
    for (int g = 0; g < G; ++g) Prefetch<(kBlockBytes + 63) / 64>(first_block + g * group_bytes);
    // Not unrolled: unrolled, GCC 12 loaded all four steps' codes up front and spilled them and half
    // the dot sums to the stack (143 stack accesses per block of a 4-row tile). The 30 layers'
    // projections (scratch timing, alternating builds, median of 20): 32 rows 54-65 -> 43-46 ms,
    // 256 rows 373-406 -> 271-321 ms.
#pragma GCC unroll 1
    for (int64_t s = 0; s < kBlock / kStep; ++s) {
      __m256i low[G], high[G];
      for (int g = 0; g < G; ++g) {
        const __m256i bytes = Load32(first_block + g * group_bytes + s * kStepBytes);
        low[g] = _mm256_and_si256(bytes, nibble);
        high[g] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
      }
      for (int i = 0; i < RT; ++i) {
        const int8_t* q = p.x + (m0 + i) * p.depth + b * kBlock + s * kStep;
        const __m256i first = Broadcast4(q), last = Broadcast4(q + 4);
        for (int g = 0; g < G; ++g) {
          const __m256i products = _mm256_add_epi16(_mm256_maddubs_epi16(low[g], first), _mm256_maddubs_epi16(high[g], last));
          dots[i][g] = _mm256_add_epi16(dots[i][g], products);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 scales = LoadHalves(p.scales(n0 + g * kGroup, b));
      const __m256 mins = LoadHalves(p.mins(n0 + g * kGroup, b));
      for (int i = 0; i < RT; ++i) {
        const int64_t at = (m0 + i) * blocks + b;
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dots[i][g], ones));
        acc[i][g] = _mm256_fmadd_ps(dot, _mm256_mul_ps(scales, _mm256_set1_ps(p.x_scale[at])), acc[i][g]);
        acc[i][g] = _mm256_fmadd_ps(mins, _mm256_set1_ps(p.x_sum[at]), acc[i][g]);
      }
    }
  }
  for (int i = 0; i < RT; ++i)
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(p.y + (m0 + i) * p.channels + n0 + g * kGroup, acc[i][g]);
}

// Two groups per tile share each row's broadcast inputs. The 30 layers' projections (AMD Zen 3,
// scratch timing, best of 20) against one group: 1 row 5.75 against 6.36 ms, 32 rows 49.8 against
// 57.2, 512 rows alike.
constexpr int64_t kTileChannels = 2 * kGroup;

#else  // Portable: plain loops.

// The code of input k of channel n.
inline int Code(const Problem& p, int64_t n, int64_t k) {
  const uint8_t byte = p.block(n, k / kBlock)[k % kBlock / kStep * kStepBytes + n % kGroup * (kStep / 2) + k % (kStep / 2)];
  return k % kStep < kStep / 2 ? byte & 0x0F : byte >> 4;
}

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  const int64_t blocks = p.blocks();
  for (int i = 0; i < RT; ++i) {
    const int64_t m = m0 + i;
    for (int j = 0; j < CT; ++j) {
      const int64_t n = n0 + j;
      float total = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) sum += Code(p, n, k) * static_cast<int32_t>(p.x[m * p.depth + k]);
        const float factor = HalfToFloat(p.scales(n, b)[n % kGroup]) * p.x_scale[m * blocks + b];
        total = std::fma(static_cast<float>(sum), factor, total);
        total = std::fma(HalfToFloat(p.mins(n, b)[n % kGroup]), p.x_sum[m * blocks + b], total);
      }
      p.y[m * p.channels + n] = total;
    }
  }
}

constexpr int64_t kTileChannels = kGroup;

#endif

// The tiles of this file, for pooled::RunTiles: whole groups of channels.
struct Tiles {
  static constexpr int kChannelTile = kTileChannels;
  static constexpr int kRowTile = 4;
  static constexpr int64_t kChunkChannels = 16;  // 16, 32 and 64 timed alike
  static constexpr int kChannelStep = kGroup;

  template <int RT, int CT>
  static void Run(const Problem& p, int64_t m0, int64_t n0) {
    Tile<RT, CT>(p, m0, n0);
  }
};

#if defined(__AVX2__)

// One block of 32 inputs quantized (see the top of this file), 8 lanes at a time: the same
// division and rounding as the scalar loops below, so the same levels. Scalar, it took ~3 ns an
// input (microbenchmark, AMD Zen 3): ~9 ms over the 120 calls of the default model's 32-row step.
void QuantizeBlock(const float* in, int8_t* q, float* scale, float* sum) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 x[4], peak = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm256_loadu_ps(in + 8 * i);
    peak = _mm256_max_ps(_mm256_and_ps(x[i], magnitude), peak);
  }
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(peak), _mm256_extractf128_ps(peak, 1));
  half = _mm_max_ps(half, _mm_movehl_ps(half, half));
  const float top = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
  const float s = top == 0.0f ? 1.0f : top * (1.0f / 127.0f);
  __m256i levels[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 rounded = _mm256_round_ps(_mm256_div_ps(x[i], _mm256_set1_ps(s)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    levels[i] = _mm256_cvtps_epi32(rounded);
  }
  const __m256i total = _mm256_add_epi32(_mm256_add_epi32(levels[0], levels[1]), _mm256_add_epi32(levels[2], levels[3]));
  // Packing works within 128-bit halves: the permutation puts the 32 bytes back in input order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(levels[0], levels[1]), _mm256_packs_epi32(levels[2], levels[3]));
  const __m256i in_order = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), in_order);
  *scale = s;
  *sum = s * static_cast<float>(pooled::Sum(total));
}

#else

void QuantizeBlock(const float* in, int8_t* q, float* scale, float* sum) {
  float peak = 0.0f;
  for (int64_t k = 0; k < kBlock; ++k) peak = std::max(peak, std::fabs(in[k]));
  const float s = peak == 0.0f ? 1.0f : peak * (1.0f / 127.0f);
  int32_t total = 0;
  for (int64_t k = 0; k < kBlock; ++k) {
    const int8_t level = static_cast<int8_t>(std::nearbyint(in[k] / s));
    q[k] = level;
    total += level;
  }
  *scale = s;
  *sum = s * static_cast<float>(total);
}

#endif

// x's rows quantized per block (see the top of this file), on the calling thread: vectorized, a
// 512-row prompt chunk's largest x (1536 inputs a row) takes ~0.25 ms. Shared with XLA's pool as
// well, the 30 layers' projections at 256 rows timed slower in two alternating runs (best of 40:
// 232 and 278 ms against 204 and 229 for the scalar loops), not faster.
void QuantizeBlocks(const float* x, int64_t rows, int64_t depth, int8_t* q, float* scale, float* sum) {
  for (int64_t block = 0; block < rows * depth / kBlock; ++block) {
    QuantizeBlock(x + block * kBlock, q + block * kBlock, scale + block, sum + block);
  }
}

ffi::Error Q4Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights, ffi::RemainingRets ys) {
  if (x.dimensions().size() != 2 || x.dimensions()[1] % kBlock != 0 || weights.size() != ys.size()) {
    return ffi::Error::InvalidArgument("pooled_q4_matmul: expected x [M, K] (K a multiple of 32) and a weight per result");
  }
  const int64_t rows = x.dimensions()[0], depth = x.dimensions()[1], blocks = depth / kBlock;
  std::vector<int8_t> q(rows * depth);
  std::vector<float> x_scale(rows * blocks), x_sum(rows * blocks);
  QuantizeBlocks(x.typed_data(), rows, depth, q.data(), x_scale.data(), x_sum.data());
  std::vector<Problem> problems;
  for (size_t i = 0; i < ys.size(); ++i) {
    auto weight = weights.get<ffi::Buffer<ffi::U8>>(i);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (!weight.has_value() || !y.has_value() || weight->dimensions().size() != 2 ||
        weight->dimensions()[1] != blocks * kBlockBytes / kGroup) {
      return ffi::Error::InvalidArgument("pooled_q4_matmul: a weight is not uint8 [N, K/32 * 20]");
    }
    const int64_t channels = weight->dimensions()[0];
    if (channels % kGroup != 0) {
      return ffi::Error::InvalidArgument("pooled_q4_matmul: the channels must be a multiple of 8");
    }
    if (static_cast<int64_t>((*y)->element_count()) != rows * channels) {
      return ffi::Error::InvalidArgument("pooled_q4_matmul: the result must be f32 [M, N]");
    }
    problems.push_back(
        Problem{q.data(), x_scale.data(), x_sum.data(), weight->typed_data(), (*y)->typed_data(), rows, channels, depth});
  }
  pooled::RunTiles<Tiles>(pool, problems);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledQ4Matmul, Q4Matmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
