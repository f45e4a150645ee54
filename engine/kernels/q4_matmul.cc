// pooled_q4_matmul: the one-token matmul of `--quantization w4a8` (engine/int4.py) as an XLA CPU
// custom call: llama.cpp's Q4_1 weights against Q8 activations.
//
// Weights [N, K] come in blocks of 32 inputs: 4-bit codes c (two per byte; each 64 inputs in 32
// bytes, low nibbles the first 32) with an f16 scale d and minimum m per block, standing for
// d * c + m. x f32 [M, K] is quantized here per block of 32 inputs: s = max |x| / 127 (1 for a zero
// block), q = x / s rounded half to even, and the block's sum t = s * sum(q). Then
//   y[m, n] = sum over blocks b of (d[n, b] * s[m, b]) * sum_k c[n, k] * q[m, k]  +  m[n, b] * t[m, b],
// the integer dot of each block exact, the float sums over blocks in a fixed order per (m, n):
// a row's result never depends on the other rows of the call.
// One call takes any number of weights, each (codes, scales, mins), against the same x and returns a
// y for each (q, k and v; gate and up): one parallel region streams all their weights.
// Threads: chunks of output channels are shared with XLA's pool (parallel.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr int64_t kBlock = 32;  // inputs per scale and minimum
constexpr int64_t kChunk = 64;  // inputs per 32 bytes of codes

struct Problem {
  const int8_t* x;        // [rows, depth], quantized per block
  const float* x_scale;   // [rows, blocks]
  const float* x_sum;     // [rows, blocks]: the block's scale times the sum of its quantized inputs
  const uint8_t* codes;   // [channels, depth / 2]
  const uint16_t* scales;  // [channels, blocks], f16
  const uint16_t* mins;   // [channels, blocks], f16
  float* y;
  int64_t rows;
  int64_t channels;
  int64_t depth;

  int64_t blocks() const { return depth / kBlock; }
};

inline float HalfToFloat(uint16_t half) {
#if defined(__F16C__)
  return _cvtsh_ss(half);
#else
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const int exponent = (half >> 10) & 0x1F;
  const uint32_t mantissa = half & 0x3FF;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits |= sign;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
#endif
}

// The code of input k in a row of codes.
inline int Code(const uint8_t* row, int64_t k) {
  const uint8_t byte = row[k / kChunk * kBlock + k % kBlock];
  return k % kChunk < kBlock ? byte & 0x0F : byte >> 4;
}

// sum over blocks of mins[b] * x_sum[b], in a fixed order.
float MinsTerm(const uint16_t* mins, const float* x_sum, int64_t blocks) {
  int64_t b = 0;
  float total = 0.0f;
#if defined(__AVX2__) && defined(__F16C__)
  __m256 acc = _mm256_setzero_ps();
  for (; b + 8 <= blocks; b += 8) {
    const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + b)));
    acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(x_sum + b), acc);
  }
  total = Sum(acc);
#endif
  for (; b < blocks; ++b) total += HalfToFloat(mins[b]) * x_sum[b];
  return total;
}

#if defined(__AVX2__) && defined(__F16C__)

constexpr int64_t kGroup = 8;  // blocks whose integer dots are summed side by side, one per lane

// The codes (0..15 in each byte) of blocks 2c and 2c + 1 of a row, from chunk c's 32 bytes.
inline void ChunkCodes(const uint8_t* row, int64_t c, __m256i& even, __m256i& odd) {
  const __m256i bytes = Load32(row + c * kBlock);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  even = _mm256_and_si256(bytes, nibble);
  odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
}

// The integer dots of 8 blocks of codes with 8 blocks of q, lane b for block b. vpmaddubsw makes
// 16-bit pair sums (within 2 * 15 * 127); three rounds of vphaddw add them up per block (within
// 16 * 2 * 15 * 127 = 30480, still 16 bits) with the lanes of each 128-bit half in block order.
inline __m256i GroupDots(const __m256i (&codes)[kGroup], const int8_t* q) {
  __m256i pairs[kGroup];
  for (int b = 0; b < kGroup; ++b) pairs[b] = _mm256_maddubs_epi16(codes[b], Load32(q + b * kBlock));
  const __m256i quads[4] = {_mm256_hadd_epi16(pairs[0], pairs[1]), _mm256_hadd_epi16(pairs[2], pairs[3]),
                            _mm256_hadd_epi16(pairs[4], pairs[5]), _mm256_hadd_epi16(pairs[6], pairs[7])};
  const __m256i halves = _mm256_hadd_epi16(_mm256_hadd_epi16(quads[0], quads[1]), _mm256_hadd_epi16(quads[2], quads[3]));
  return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(halves)),
                          _mm256_cvtepi16_epi32(_mm256_extracti128_si256(halves, 1)));
}

// Per (row, channel): groups of 8 blocks scaled lane by lane (8 block scales times 8 row scales),
// then the remaining blocks one by one; a fixed order for each (row, channel).
template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  const int64_t row_bytes = p.depth / 2, blocks = p.blocks();
  __m256 acc[RT][CT];
  for (int i = 0; i < RT; ++i)
    for (int j = 0; j < CT; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + kGroup <= blocks; b += kGroup) {
    Prefetch<2 * CT>(p.codes + n0 * row_bytes + b * kBlock / 2 * CT);  // 128 bytes of each of CT rows
    for (int j = 0; j < CT; ++j) {
      const int64_t n = n0 + j;
      __m256i codes[kGroup];
      for (int c = 0; c < kGroup / 2; ++c) ChunkCodes(p.codes + n * row_bytes, b / 2 + c, codes[2 * c], codes[2 * c + 1]);
      const __m256 scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales + n * blocks + b)));
      for (int i = 0; i < RT; ++i) {
        const int64_t m = m0 + i;
        const __m256 dots = _mm256_cvtepi32_ps(GroupDots(codes, p.x + m * p.depth + b * kBlock));
        const __m256 factors = _mm256_mul_ps(scales, _mm256_loadu_ps(p.x_scale + m * blocks + b));
        acc[i][j] = _mm256_fmadd_ps(dots, factors, acc[i][j]);
      }
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < RT; ++i) {
    const int64_t m = m0 + i;
    for (int j = 0; j < CT; ++j) {
      const int64_t n = n0 + j;
      float total = Sum(acc[i][j]);
      for (int64_t r = b; r < blocks; ++r) {
        __m256i codes[2];
        ChunkCodes(p.codes + n * row_bytes, r / 2, codes[0], codes[1]);
        const __m256i pairs = _mm256_maddubs_epi16(codes[r % 2], Load32(p.x + m * p.depth + r * kBlock));
        const float dot = static_cast<float>(Sum(_mm256_madd_epi16(pairs, ones)));
        total += dot * (HalfToFloat(p.scales[n * blocks + r]) * p.x_scale[m * blocks + r]);
      }
      p.y[m * p.channels + n] = total + MinsTerm(p.mins + n * blocks, p.x_sum + m * blocks, blocks);
    }
  }
}

#else  // Portable: plain loops.

template <int RT, int CT>
void Tile(const Problem& p, int64_t m0, int64_t n0) {
  const int64_t row_bytes = p.depth / 2, blocks = p.blocks();
  for (int i = 0; i < RT; ++i) {
    const int64_t m = m0 + i;
    for (int j = 0; j < CT; ++j) {
      const int64_t n = n0 + j;
      float total = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
          sum += Code(p.codes + n * row_bytes, k) * static_cast<int32_t>(p.x[m * p.depth + k]);
        }
        total += static_cast<float>(sum) * (HalfToFloat(p.scales[n * blocks + b]) * p.x_scale[m * blocks + b]);
      }
      p.y[m * p.channels + n] = total + MinsTerm(p.mins + n * blocks, p.x_sum + m * blocks, blocks);
    }
  }
}

#endif

// The tiles of this file, for pooled::RunTiles.
struct Tiles {
  template <int RT, int CT>
  static void Run(const Problem& p, int64_t m0, int64_t n0) {
    Tile<RT, CT>(p, m0, n0);
  }
};

void QuantizeBlocks(const float* x, int64_t rows, int64_t depth, int8_t* q, float* scale, float* sum) {
  for (int64_t block = 0; block < rows * depth / kBlock; ++block) {
    const float* in = x + block * kBlock;
    float peak = 0.0f;
    for (int64_t k = 0; k < kBlock; ++k) peak = std::max(peak, std::fabs(in[k]));
    const float s = peak == 0.0f ? 1.0f : peak * (1.0f / 127.0f);
    int32_t total = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      const int8_t level = static_cast<int8_t>(std::nearbyint(in[k] / s));
      q[block * kBlock + k] = level;
      total += level;
    }
    scale[block] = s;
    sum[block] = s * static_cast<float>(total);
  }
}

ffi::Error Q4Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights, ffi::RemainingRets ys) {
  if (x.dimensions().size() != 2 || x.dimensions()[1] % kChunk != 0 || weights.size() != 3 * ys.size()) {
    return ffi::Error::InvalidArgument(
        "pooled_q4_matmul: expected x [M, K] (K a multiple of 64) and a (codes, scales, mins) triple per result");
  }
  const int64_t rows = x.dimensions()[0], depth = x.dimensions()[1], blocks = depth / kBlock;
  std::vector<int8_t> q(rows * depth);
  std::vector<float> x_scale(rows * blocks), x_sum(rows * blocks);
  QuantizeBlocks(x.typed_data(), rows, depth, q.data(), x_scale.data(), x_sum.data());
  std::vector<Problem> problems;
  for (size_t i = 0; i < ys.size(); ++i) {
    auto codes = weights.get<ffi::Buffer<ffi::U8>>(3 * i);
    auto scales = weights.get<ffi::Buffer<ffi::F16>>(3 * i + 1);
    auto mins = weights.get<ffi::Buffer<ffi::F16>>(3 * i + 2);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (!codes.has_value() || !scales.has_value() || !mins.has_value() || !y.has_value() ||
        codes->dimensions().size() != 2 || codes->dimensions()[1] != depth / 2) {
      return ffi::Error::InvalidArgument("pooled_q4_matmul: a weight is not uint8 codes [N, K/2] with f16 scales and mins");
    }
    const int64_t channels = codes->dimensions()[0];
    const auto count = [](const auto& buffer) { return static_cast<int64_t>(buffer.element_count()); };
    if (count(*scales) != channels * blocks || count(*mins) != channels * blocks || count(**y) != rows * channels) {
      return ffi::Error::InvalidArgument("pooled_q4_matmul: scales and mins must be [N, K/32], the result f32 [M, N]");
    }
    problems.push_back(Problem{q.data(), x_scale.data(), x_sum.data(), codes->typed_data(), scales->typed_data(),
                               mins->typed_data(), (*y)->typed_data(), rows, channels, depth});
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
