// pooled_gguf_matmul: the matmuls of a GGUF's own blocks (engine/model/gguf_weights.py), prompts and
// decode steps, as an XLA CPU custom call; pooled_gguf_rows: an embedding table's rows, dequantized.
//
// Each weight [N, K] is the file's bytes, one row of blocks per output channel (gguf_blocks.h), in
// its own format: one call takes several weights (q, k and v; gate and up), each with its format.
// The activations x f32 [M, K] are quantized here once per call, as llama.cpp quantizes them for
// each format, so the integer part of every dot is llama.cpp's own:
//   - for the legacy formats, blocks of 32 (llama.cpp's Q8_0 and Q8_1): d = max |x| / 127 kept as
//     an f16, q = x * 127 / max |x| rounded half to even, and (Q8_1) s = f16(d * sum q);
//   - for the K formats, blocks of 256 (Q8_K): the input of largest magnitude, max, maps to -127:
//     q = min(127, round(x * -127 / max)), d = 1 / (-127 / max) in f32, and the sums of q per 16.
// Then per block, for each channel n and row m, with the integer dot of the codes and q:
//   Q4_0, Q5_0: d_w d_a sum (c - o) q, o = 8 or 16;   Q4_1, Q5_1: d_w d_a sum c q + m_w s_a
//   Q8_0: d_w d_a sum w q;   Q4_K, Q5_K: d_w d_a sum_j s_j (c q)_j - dmin_w d_a sum_j m_j (sum q)_j
//   Q6_K: d_w d_a sum_g s_g ((c q)_g - 32 (sum q)_g)
// added up in f32 per row. A row's result never depends on the other rows of the call.
// With AVX-512 VNNI, the legacy formats serve every full group of eight rows with one row in each
// lane (the lane path, below). The row tiles (AVX2, with VNNI's vpdpbusd where the CPU has it)
// decode a block's codes once into 32-byte runs and dot each run with every row of a tile
// (vpmaddubsw: unsigned codes, or signed values' magnitudes, times signed q); the portable loops
// compute the same integers.
// Threads: chunks of output channels are shared with XLA's pool (parallel.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf_blocks.h"
#include "halves.h"
#include "parallel.h"
#include "vector_ops.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using namespace pooled::gguf;
using pooled::LoadHalf;
using pooled::RoundToHalf;

// x quantized per block, for every format of the call.
struct Activations {
  int64_t rows = 0, depth = 0;
  // Blocks of 32 (legacy formats): q [rows, depth], per block d and s = d sum q (f16-rounded).
  std::vector<int8_t> small_q;
  std::vector<float> small_d, small_s;
  // Blocks of 256 (K formats): q [rows, depth], per block d, per 16 inputs sum q.
  std::vector<int8_t> super_q;
  std::vector<float> super_d;
  std::vector<int32_t> super_sums;
  // The full groups of kLaneRows rows, packed for the lane path (below): per group, block and run
  // of 4 inputs, a vector of the rows' 4 codes each (signed, and plus 128 as unsigned), and per
  // group and block the rows' d and s.
  int64_t groups = 0;
  std::vector<int8_t> lane_q;
  std::vector<uint8_t> lane_uq;
  std::vector<float> lane_d, lane_s;

  int64_t small_blocks() const { return depth / kSmall; }
  int64_t super_blocks() const { return depth / kSuper; }
};

void QuantizeSmall(const float* x, Activations& a) {
  const int64_t blocks = a.rows * a.small_blocks();
  a.small_q.resize(a.rows * a.depth);
  a.small_d.resize(blocks);
  a.small_s.resize(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* in = x + b * kSmall;
    float peak = 0.0f;
    for (int64_t k = 0; k < kSmall; ++k) peak = std::max(peak, std::fabs(in[k]));
    const float d = peak / 127.0f, inverse = peak != 0.0f ? 127.0f / peak : 0.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kSmall; ++k) {
      const int8_t level = static_cast<int8_t>(std::nearbyint(in[k] * inverse));
      a.small_q[b * kSmall + k] = level;
      sum += level;
    }
    a.small_d[b] = RoundToHalf(d);
    a.small_s[b] = RoundToHalf(d * static_cast<float>(sum));
  }
}

// The legacy formats' rows dotted eight at a time, one row in each 32-bit lane (AVX-512 VNNI): a
// channel's block is read as eight runs of 4 values, each broadcast to every lane and dotted
// (vpdpbusd) with the eight rows' 4 codes of that run, so a block costs eight rows 8 dots and 8
// scaled adds where the row tiles cost each row a dot, a sign and a scaled add. Run r's sums are
// exactly lane r of a row tile's dot, scaled and added in the same order, so a row's result is the
// same bits whichever path served it. The K formats stay on the row tiles: their sub-block scales
// need int16 lanes (vpdpwssd), twice the bytes a product, and that was no faster (tried).
constexpr int64_t kLaneRows = 8;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
constexpr bool kLanePath = true;
#else
constexpr bool kLanePath = false;
#endif

void PackSmallLanes(Activations& a) {
  const int64_t blocks = a.small_blocks();
  a.groups = a.rows / kLaneRows;
  a.lane_q.resize(a.groups * blocks * kLaneRows * kSmall);
  a.lane_uq.resize(a.lane_q.size());
  a.lane_d.resize(a.groups * blocks * kLaneRows);
  a.lane_s.resize(a.lane_d.size());
  for (int64_t g = 0; g < a.groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = g * blocks + b;
      for (int64_t r = 0; r < kLaneRows; ++r) {
        const int64_t row = g * kLaneRows + r;
        for (int64_t run = 0; run < kSmall / 4; ++run) {
          std::memcpy(&a.lane_q[(at * (kSmall / 4) + run) * kLaneRows * 4 + 4 * r], &a.small_q[row * a.depth + b * kSmall + 4 * run], 4);
        }
        a.lane_d[at * kLaneRows + r] = a.small_d[row * blocks + b];
        a.lane_s[at * kLaneRows + r] = a.small_s[row * blocks + b];
      }
    }
  }
  for (size_t i = 0; i < a.lane_q.size(); ++i) a.lane_uq[i] = static_cast<uint8_t>(a.lane_q[i]) ^ 0x80;
}

void QuantizeSuper(const float* x, Activations& a) {
  const int64_t blocks = a.rows * a.super_blocks();
  a.super_q.resize(a.rows * a.depth);
  a.super_d.resize(blocks);
  a.super_sums.resize(blocks * (kSuper / 16));
  for (int64_t b = 0; b < blocks; ++b) {
    const float* in = x + b * kSuper;
    int8_t* q = a.super_q.data() + b * kSuper;
    float peak = 0.0f, extreme = 0.0f;
    for (int64_t k = 0; k < kSuper; ++k) {
      if (std::fabs(in[k]) > peak) {
        peak = std::fabs(in[k]);
        extreme = in[k];
      }
    }
    if (peak == 0.0f) {
      std::fill(q, q + kSuper, 0);
      a.super_d[b] = 0.0f;
    } else {
      const float inverse = -127.0f / extreme;
      for (int64_t k = 0; k < kSuper; ++k) q[k] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(inverse * in[k])));
      a.super_d[b] = 1.0f / inverse;
    }
    for (int64_t g = 0; g < kSuper / 16; ++g) {
      int32_t sum = 0;
      for (int64_t k = 0; k < 16; ++k) sum += q[16 * g + k];
      a.super_sums[b * (kSuper / 16) + g] = sum;
    }
  }
}

// ---- Decoding a block's codes into runs of 32 bytes, and the integer dots of the runs. ----

// A legacy block's weights as signed values (Q8_0's own; Q4_0's and Q5_0's codes less their
// offset, 8 or 16), with their magnitudes: decoded once per block, dotted with every row.
struct SignedRun {
  alignas(32) int8_t values[kSmall];
  alignas(32) uint8_t magnitudes[kSmall];
};

#if defined(__AVX2__)

using pooled::Load32;
inline void Store32(void* bytes, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(bytes), v); }

// Integers partly summed in 8 lanes.
using Ints = __m256i;
inline Ints Zero() { return _mm256_setzero_si256(); }
inline Ints Add(Ints a, Ints b) { return _mm256_add_epi32(a, b); }
inline Ints AddScalar(Ints a, int32_t value) { return _mm256_add_epi32(a, _mm256_castsi128_si256(_mm_cvtsi32_si128(value))); }
inline int32_t Total(Ints a) { return pooled::Sum(a); }

// acc + the dot of 32 unsigned codes (at most 128) with 32 signed q, in int32 lanes.
inline Ints Dot(Ints acc, const uint8_t* codes, const int8_t* q) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, Load32(codes), Load32(q));
#else
  return Add(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(Load32(codes), Load32(q)), _mm256_set1_epi16(1)));
#endif
}

// acc + the dot of 32 signed values w with 32 signed q, as |w| times q with w's sign (|w| at most
// 128, so vpmaddubsw's pair sums stay below 2^15).
inline Ints SignedDot(Ints acc, const SignedRun& w, const int8_t* q) {
  const __m256i signed_q = _mm256_sign_epi8(Load32(q), Load32(w.values));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, Load32(w.magnitudes), signed_q);
#else
  return Add(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(Load32(w.magnitudes), signed_q), _mm256_set1_epi16(1)));
#endif
}

// acc + the dot of 32 codes (at most 63) with q, the first 16 products times `first`, the last 16
// times `second`.
inline Ints ScaledDot(Ints acc, const uint8_t* codes, const int8_t* q, int first, int second) {
  const __m256i pairs = _mm256_maddubs_epi16(Load32(codes), Load32(q));
  const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(second)), _mm_set1_epi16(static_cast<int16_t>(first)));
  return Add(acc, _mm256_madd_epi16(pairs, scales));
}

// f32 sums in 8 lanes.
using Floats = __m256;
inline Floats ZeroFloats() { return _mm256_setzero_ps(); }
inline Floats Accumulate(Floats acc, Ints dot, float scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc);
}
inline float Total(Floats acc) { return pooled::Sum(acc); }

inline __m256i SmallRun(int32_t format, const uint8_t* block) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + CodesOffset(format)));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  __m256i run = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), nibble), _mm_and_si128(packed, nibble));
  if (format == kQ5_0 || format == kQ5_1) {
    uint32_t bits;
    std::memcpy(&bits, block + CodesOffset(format) - 4, sizeof bits);
    // Byte k of the run gets byte k / 8 of the bits (each 128-bit lane holds all four), then its bit k % 8.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int32_t>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    run = _mm256_or_si256(run, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  }
  return run;
}

inline void DecodeSmall(int32_t format, const uint8_t* block, uint8_t* codes) { Store32(codes, SmallRun(format, block)); }

// Q8_0's values, or a Q4_0 or Q5_0 block's codes less their offset.
inline __m256i SignedValues(int32_t format, const uint8_t* block) {
  if (format == kQ8_0) return Load32(block + 2);
  return _mm256_sub_epi8(SmallRun(format, block), _mm256_set1_epi8(format == kQ4_0 ? 8 : 16));
}

// A block's signed values and their magnitudes.
inline void DecodeSigned(int32_t format, const uint8_t* block, SignedRun& w) {
  const __m256i values = SignedValues(format, block);
  Store32(w.values, values);
  Store32(w.magnitudes, _mm256_abs_epi8(values));
}

inline void DecodeSuperNibbles(const uint8_t* bytes, const uint8_t* high, uint8_t* codes) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i bits = high != nullptr ? Load32(high) : _mm256_setzero_si256();
  for (int chunk = 0; chunk < 4; ++chunk) {
    const __m256i packed = Load32(bytes + 32 * chunk);
    __m256i runs[2] = {_mm256_and_si256(packed, nibble), _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble)};
    if (high != nullptr) {
      for (int h = 0; h < 2; ++h) {
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (2 * chunk + h)));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bits, bit), bit);
        runs[h] = _mm256_or_si256(runs[h], _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
      }
    }
    Store32(codes + 64 * chunk, runs[0]);
    Store32(codes + 64 * chunk + 32, runs[1]);
  }
}

inline void DecodeSixBit(const uint8_t* low, const uint8_t* high, uint8_t* codes) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), pair = _mm256_set1_epi8(3);
  for (int half = 0; half < 2; ++half) {
    const __m256i first = Load32(low + 64 * half), second = Load32(low + 64 * half + 32), bits = Load32(high + 32 * half);
    auto top = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, shift), pair), 4); };
    uint8_t* out = codes + 128 * half;
    Store32(out, _mm256_or_si256(_mm256_and_si256(first, nibble), top(0)));
    Store32(out + 32, _mm256_or_si256(_mm256_and_si256(second, nibble), top(2)));
    Store32(out + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(first, 4), nibble), top(4)));
    Store32(out + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(second, 4), nibble), top(6)));
  }
}

#else  // Portable: plain loops over the same integers.

using Ints = int32_t;
inline Ints Zero() { return 0; }
inline Ints Add(Ints a, Ints b) { return a + b; }
inline Ints AddScalar(Ints a, int32_t value) { return a + value; }
inline int32_t Total(Ints a) { return a; }

inline Ints Dot(Ints acc, const uint8_t* codes, const int8_t* q) {
  for (int k = 0; k < 32; ++k) acc += static_cast<int32_t>(codes[k]) * q[k];
  return acc;
}

inline Ints SignedDot(Ints acc, const SignedRun& w, const int8_t* q) {
  for (int k = 0; k < 32; ++k) acc += static_cast<int32_t>(w.values[k]) * q[k];
  return acc;
}

inline Ints ScaledDot(Ints acc, const uint8_t* codes, const int8_t* q, int first, int second) {
  int32_t sums[2] = {0, 0};
  for (int k = 0; k < 32; ++k) sums[k / 16] += static_cast<int32_t>(codes[k]) * q[k];
  return acc + first * sums[0] + second * sums[1];
}

using Floats = float;
inline Floats ZeroFloats() { return 0.0f; }
inline Floats Accumulate(Floats acc, Ints dot, float scale) { return std::fma(static_cast<float>(dot), scale, acc); }
inline float Total(Floats acc) { return acc; }

inline void DecodeSmall(int32_t format, const uint8_t* block, uint8_t* codes) {
  SmallNibbles(block + CodesOffset(format), codes);
  if (format == kQ5_0 || format == kQ5_1) SmallHighBits(block + CodesOffset(format) - 4, codes);
}

inline void DecodeSuperNibbles(const uint8_t* bytes, const uint8_t* high, uint8_t* codes) { SuperNibbles(bytes, high, codes); }

inline void DecodeSixBit(const uint8_t* low, const uint8_t* high, uint8_t* codes) { SixBitCodes(low, high, codes); }

#endif

#if !defined(__AVX2__)
// Q8_0's values, or a Q4_0 or Q5_0 block's codes less their offset, and their magnitudes.
inline void DecodeSigned(int32_t format, const uint8_t* block, SignedRun& w) {
  if (format == kQ8_0) {
    std::memcpy(w.values, block + 2, kSmall);
  } else {
    alignas(32) uint8_t codes[kSmall];
    DecodeSmall(format, block, codes);
    const int offset = format == kQ4_0 ? 8 : 16;
    for (int k = 0; k < kSmall; ++k) w.values[k] = static_cast<int8_t>(codes[k] - offset);
  }
  for (int k = 0; k < kSmall; ++k) w.magnitudes[k] = static_cast<uint8_t>(std::abs(static_cast<int>(w.values[k])));
}
#endif

// ---- One channel against a tile of RT rows, block by block. ----

struct Problem {
  const Activations* x;
  int32_t format;
  const uint8_t* weight;  // [channels, row_bytes]
  int64_t row_bytes;
  float* y;  // [rows, channels]
  int64_t rows, channels, depth;
};

// A tile's sums per row: the blocks' scaled dots in 8 lanes, and the scalar terms beside them.
template <int RT>
struct RowSums {
  Floats acc[RT];
  float side[RT];

  RowSums() {
    for (int i = 0; i < RT; ++i) {
      acc[i] = ZeroFloats();
      side[i] = 0.0f;
    }
  }

  void Store(const Problem& p, int64_t n, int64_t m0) const {
    for (int i = 0; i < RT; ++i) p.y[(m0 + i) * p.channels + n] = Total(acc[i]) + side[i];
  }
};


// The format is a template argument: its branches are decided once, not per block.
template <int RT, int32_t kFormat>
void SmallTile(const Problem& p, int64_t n, int64_t m0) {
  const Activations& a = *p.x;
  const int64_t blocks = a.small_blocks(), bytes = BlockBytes(kFormat);
  // Q8_0, Q4_0 and Q5_0 dot signed values (llama.cpp's integers: codes less their offset);
  // Q4_1 and Q5_1 their unsigned codes, the minimum added apart.
  constexpr bool has_min = kFormat == kQ4_1 || kFormat == kQ5_1;
  RowSums<RT> sums;
  Floats* acc = sums.acc;
  float* side = sums.side;
  alignas(32) uint8_t codes[kSmall];
  SignedRun run;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = p.weight + n * p.row_bytes + b * bytes;
    const float d = LoadHalf(block);
    if constexpr (has_min) {
      DecodeSmall(kFormat, block, codes);
    } else {
      DecodeSigned(kFormat, block, run);
    }
    const float m = has_min ? LoadHalf(block + 2) : 0.0f;
    for (int i = 0; i < RT; ++i) {
      const int64_t at = (m0 + i) * blocks + b;
      const int8_t* q = a.small_q.data() + at * kSmall;
      const Ints dot = has_min ? Dot(Zero(), codes, q) : SignedDot(Zero(), run, q);
      acc[i] = Accumulate(acc[i], dot, d * a.small_d[at]);
      if (has_min) side[i] = std::fma(m, a.small_s[at], side[i]);
    }
  }
  sums.Store(p, n, m0);
}

template <int RT, int32_t kFormat>
void SuperTile(const Problem& p, int64_t n, int64_t m0) {
  const Activations& a = *p.x;
  const int64_t blocks = a.super_blocks(), bytes = BlockBytes(kFormat);
  RowSums<RT> sums;
  Floats* acc = sums.acc;
  float* side = sums.side;
  alignas(32) uint8_t codes[kSuper];
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = p.weight + n * p.row_bytes + b * bytes;
    if constexpr (kFormat == kQ6_K) {
      DecodeSixBit(block + kQ6Low, block + kQ6High, codes);
      const int8_t* scales = reinterpret_cast<const int8_t*>(block + kQ6Scales);
      const float d = LoadHalf(block + kQ6D);
      for (int i = 0; i < RT; ++i) {
        const int64_t at = (m0 + i) * blocks + b;
        const int8_t* q = a.super_q.data() + at * kSuper;
        const int32_t* sums = a.super_sums.data() + at * (kSuper / 16);
        Ints dot = Zero();
        int32_t offset = 0;
        for (int r = 0; r < 8; ++r) dot = ScaledDot(dot, codes + 32 * r, q + 32 * r, scales[2 * r], scales[2 * r + 1]);
        for (int g = 0; g < 16; ++g) offset += scales[g] * sums[g];
        acc[i] = Accumulate(acc[i], AddScalar(dot, -32 * offset), d * a.super_d[at]);
      }
    } else {
      uint8_t scales[8], mins[8];
      SuperScales(block + kKScales, scales, mins);
      DecodeSuperNibbles(block + CodesOffset(kFormat), kFormat == kQ5_K ? block + kKHigh : nullptr, codes);
      const float d = LoadHalf(block), dmin = LoadHalf(block + 2);
      for (int i = 0; i < RT; ++i) {
        const int64_t at = (m0 + i) * blocks + b;
        const int8_t* q = a.super_q.data() + at * kSuper;
        const int32_t* sums = a.super_sums.data() + at * (kSuper / 16);
        Ints dot = Zero();
        int32_t minimum = 0;
        for (int j = 0; j < 8; ++j) {
          dot = ScaledDot(dot, codes + 32 * j, q + 32 * j, scales[j], scales[j]);
          minimum += mins[j] * (sums[2 * j] + sums[2 * j + 1]);
        }
        acc[i] = Accumulate(acc[i], dot, d * a.super_d[at]);
        side[i] = std::fma(-dmin * a.super_d[at], static_cast<float>(minimum), side[i]);
      }
    }
  }
  sums.Store(p, n, m0);
}

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)

// A legacy block decoded for the lane path: Q8_0's, Q4_0's and Q5_0's signed values, dotted with
// the rows' codes plus 128 (vpdpbusd takes one side unsigned), each run's dot starting from -128
// times the run's values' sum; Q4_1's and Q5_1's unsigned codes, dotted with the signed codes.
struct LaneBlock {
  alignas(32) int8_t w[kSmall];
  int32_t start[kSmall / 4];
  float d, m;
};

void DecodeLaneBlocks(const Problem& p, int64_t n, LaneBlock* out) {
  const int64_t blocks = p.depth / kSmall, bytes = BlockBytes(p.format);
  const bool has_min = p.format == kQ4_1 || p.format == kQ5_1;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = p.weight + n * p.row_bytes + b * bytes;
    LaneBlock& w = out[b];
    w.d = LoadHalf(block);
    w.m = has_min ? LoadHalf(block + 2) : 0.0f;
    if (has_min) {
      DecodeSmall(p.format, block, reinterpret_cast<uint8_t*>(w.w));
      std::fill(std::begin(w.start), std::end(w.start), 0);
    } else {
      const __m256i values = SignedValues(p.format, block);
      Store32(w.w, values);
      const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)), values);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.start), _mm256_sub_epi32(_mm256_setzero_si256(), sums));
    }
  }
}

// Rows g * 8 .. g * 8 + 7 against channel n's decoded blocks.
template <bool kSignedValues>
void SmallLanes(const Problem& p, const LaneBlock* w, int64_t n, int64_t g) {
  const Activations& a = *p.x;
  const int64_t blocks = a.small_blocks();
  __m256 acc[kSmall / 4];
  for (__m256& lane : acc) lane = _mm256_setzero_ps();
  __m256 side = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = g * blocks + b;
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(w[b].d), _mm256_loadu_ps(&a.lane_d[at * kLaneRows]));
    for (int run = 0; run < kSmall / 4; ++run) {
      int32_t word;
      std::memcpy(&word, w[b].w + 4 * run, sizeof word);
      const __m256i weights = _mm256_set1_epi32(word);
      __m256i dot;
      if constexpr (kSignedValues) {
        dot = _mm256_dpbusd_epi32(_mm256_set1_epi32(w[b].start[run]), Load32(&a.lane_uq[(at * (kSmall / 4) + run) * 32]), weights);
      } else {
        dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), weights, Load32(&a.lane_q[(at * (kSmall / 4) + run) * 32]));
      }
      acc[run] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[run]);
    }
    if constexpr (!kSignedValues) side = _mm256_fmadd_ps(_mm256_set1_ps(w[b].m), _mm256_loadu_ps(&a.lane_s[at * kLaneRows]), side);
  }
  // pooled::Sum's order: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)).
  const __m256 total = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                     _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
  alignas(32) float rows[kLaneRows];
  _mm256_store_ps(rows, _mm256_add_ps(total, side));
  for (int64_t r = 0; r < kLaneRows; ++r) p.y[(g * kLaneRows + r) * p.channels + n] = rows[r];
}

// Channels n0 .. end against every full group of rows; returns how many rows it served. Each
// channel's row of blocks is decoded once; a group's codes (a few KiB) stay in L1 while every
// channel of the chunk reads them.
int64_t LaneRows(const Problem& p, int64_t n0, int64_t end) {
  const Activations& a = *p.x;
  if (a.groups == 0 || Super(p.format)) return 0;
  const int64_t blocks = a.small_blocks();
  thread_local std::vector<LaneBlock> decoded;
  decoded.resize((end - n0) * blocks);
  for (int64_t n = n0; n < end; ++n) DecodeLaneBlocks(p, n, decoded.data() + (n - n0) * blocks);
  const bool has_min = p.format == kQ4_1 || p.format == kQ5_1;
  for (int64_t g = 0; g < a.groups; ++g) {
    for (int64_t n = n0; n < end; ++n) {
      const LaneBlock* w = decoded.data() + (n - n0) * blocks;
      if (has_min) {
        SmallLanes<false>(p, w, n, g);
      } else {
        SmallLanes<true>(p, w, n, g);
      }
    }
  }
  return a.groups * kLaneRows;
}

#else

int64_t LaneRows(const Problem&, int64_t, int64_t) { return 0; }

#endif

constexpr int kRowTile = 4;

template <int RT>
void Tile(const Problem& p, int64_t n, int64_t m0) {
  switch (p.format) {
    case kQ4_0: SmallTile<RT, kQ4_0>(p, n, m0); break;
    case kQ4_1: SmallTile<RT, kQ4_1>(p, n, m0); break;
    case kQ5_0: SmallTile<RT, kQ5_0>(p, n, m0); break;
    case kQ5_1: SmallTile<RT, kQ5_1>(p, n, m0); break;
    case kQ8_0: SmallTile<RT, kQ8_0>(p, n, m0); break;
    case kQ4_K: SuperTile<RT, kQ4_K>(p, n, m0); break;
    case kQ5_K: SuperTile<RT, kQ5_K>(p, n, m0); break;
    default: SuperTile<RT, kQ6_K>(p, n, m0); break;
  }
}

// Channel n against rows m0 .. M: tiles of kRowTile rows, then the rest. Rows of blocks are a few
// hundred bytes, too short for the hardware prefetcher to ramp up on: the row kPrefetchBytes
// ahead is fetched into L2 meanwhile.
void Channel(const Problem& p, int64_t n, int64_t m0) {
#if defined(__AVX2__)
  const uint8_t* ahead = p.weight + n * p.row_bytes + pooled::kPrefetchBytes;
  for (int64_t line = 0; line < p.row_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T1);
#endif
  for (; m0 + kRowTile <= p.rows; m0 += kRowTile) Tile<kRowTile>(p, n, m0);
  switch (p.rows - m0) {
    case 3: Tile<3>(p, n, m0); break;
    case 2: Tile<2>(p, n, m0); break;
    case 1: Tile<1>(p, n, m0); break;
    default: break;
  }
}

constexpr int64_t kChunkChannels = 16;

ffi::Error GgufMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights, ffi::RemainingRets ys,
                      ffi::Span<const int32_t> formats) {
  if (x.dimensions().size() != 2 || weights.size() != ys.size() || formats.size() != ys.size()) {
    return ffi::Error::InvalidArgument("pooled_gguf_matmul: expected x [M, K] and a weight, a result and a format each");
  }
  Activations a;
  a.rows = x.dimensions()[0];
  a.depth = x.dimensions()[1];
  bool small = false, super = false;
  std::vector<Problem> problems;
  for (size_t i = 0; i < ys.size(); ++i) {
    auto weight = weights.get<ffi::Buffer<ffi::U8>>(i);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    const int32_t format = formats[i];
    if (!Known(format) || a.depth % BlockInputs(format) != 0) {
      return ffi::Error::InvalidArgument("pooled_gguf_matmul: unknown format, or K not a whole number of its blocks");
    }
    const int64_t row_bytes = a.depth / BlockInputs(format) * BlockBytes(format);
    if (!weight.has_value() || !y.has_value() || weight->dimensions().size() != 2 || weight->dimensions()[1] != row_bytes) {
      return ffi::Error::InvalidArgument("pooled_gguf_matmul: a weight is not uint8 [N, K's blocks in bytes]");
    }
    const int64_t channels = weight->dimensions()[0];
    if (static_cast<int64_t>((*y)->element_count()) != a.rows * channels) {
      return ffi::Error::InvalidArgument("pooled_gguf_matmul: the result must be f32 [M, N]");
    }
    (Super(format) ? super : small) = true;
    problems.push_back(Problem{&a, format, weight->typed_data(), row_bytes, (*y)->typed_data(), a.rows, channels, a.depth});
  }
  if (small) QuantizeSmall(x.typed_data(), a);
  if (small && kLanePath && a.rows >= kLaneRows) PackSmallLanes(a);
  if (super) QuantizeSuper(x.typed_data(), a);
  pooled::ForEachChunk(pool, problems, kChunkChannels, [](const Problem& p, int64_t n0, int64_t end) {
    const int64_t served = LaneRows(p, n0, end);
    for (int64_t n = n0; n < end; ++n) Channel(p, n, served);
  });
  return ffi::Error::Success();
}

ffi::Error GgufRows(ffi::Buffer<ffi::U8> table, ffi::Buffer<ffi::S32> indices, ffi::ResultBuffer<ffi::F32> out, int32_t format) {
  if (!Known(format) || table.dimensions().size() != 2) {
    return ffi::Error::InvalidArgument("pooled_gguf_rows: expected a table uint8 [V, row bytes] of a known format");
  }
  const int64_t vocab = table.dimensions()[0], row_bytes = table.dimensions()[1];
  const int64_t count = static_cast<int64_t>(indices.element_count());
  const int64_t depth = row_bytes / BlockBytes(format) * BlockInputs(format);
  if (row_bytes % BlockBytes(format) != 0 || static_cast<int64_t>(out->element_count()) != count * depth) {
    return ffi::Error::InvalidArgument("pooled_gguf_rows: the table's rows are not whole blocks, or the result is not [n, D]");
  }
  for (int64_t i = 0; i < count; ++i) {
    // Out-of-range ids read row 0, as XLA's gather clamps (the engine never sends one).
    const int64_t row = std::clamp<int64_t>(indices.typed_data()[i], 0, vocab - 1);
    for (int64_t b = 0; b < row_bytes / BlockBytes(format); ++b) {
      Dequantize(format, table.typed_data() + row * row_bytes + b * BlockBytes(format),
                 out->typed_data() + i * depth + b * BlockInputs(format));
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledGgufMatmul, GgufMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<ffi::Span<const int32_t>>("formats"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledGgufRows, GgufRows,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("format"));
