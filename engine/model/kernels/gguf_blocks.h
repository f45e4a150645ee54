// GGUF's block formats (llama.cpp's ggml types), decoded from the file's own bytes.
//
// A row of a weight is its blocks one after another, as the file stores them. Each format decodes
// a block into unsigned integer codes, one per input in input order, and its scales; the value of
// input k is scale * code + minimum, the scale and minimum those of k's sub-block:
//   Q4_0  32 inputs, 18 bytes: f16 d, 16 bytes of 4-bit codes  -> d * (c - 8)
//   Q4_1  32 inputs, 20 bytes: f16 d, f16 m, codes             -> d * c + m
//   Q5_0  32 inputs, 22 bytes: f16 d, 32 high bits, codes      -> d * (c - 16)
//   Q5_1  32 inputs, 24 bytes: f16 d, f16 m, high bits, codes  -> d * c + m
//   Q8_0  32 inputs, 34 bytes: f16 d, 32 int8 values           -> d * q
//   Q4_K 256 inputs, 144 bytes: f16 d, f16 dmin, 8 six-bit scales and mins, 4-bit codes
//                                                              -> d * s_j * c - dmin * m_j (j: 32 inputs)
//   Q5_K 256 inputs, 176 bytes: as Q4_K with a fifth bit per code
//   Q6_K 256 inputs, 210 bytes: 6-bit codes, 16 int8 scales, f16 d -> d * s_g * (c - 32) (g: 16 inputs)
// The legacy formats (the first five) split a block's 4-bit codes as inputs 0..15 in the low
// nibbles and 16..31 in the high; the K formats put each 64 inputs' two halves in the low and high
// nibbles of 32 bytes. The numbering is ggml's (GGMLQuantizationType in gguf-py).
#pragma once

#include <cstdint>
#include <cstring>

#include "halves.h"

namespace pooled::gguf {

enum Format : int32_t { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14 };

constexpr int64_t kSmall = 32;   // inputs per block of the legacy formats
constexpr int64_t kSuper = 256;  // inputs per block of the K formats

constexpr bool Known(int32_t format) {
  return format == kQ4_0 || format == kQ4_1 || format == kQ5_0 || format == kQ5_1 || format == kQ8_0 ||
         format == kQ4_K || format == kQ5_K || format == kQ6_K;
}

constexpr bool Super(int32_t format) { return format == kQ4_K || format == kQ5_K || format == kQ6_K; }

constexpr int64_t BlockInputs(int32_t format) { return Super(format) ? kSuper : kSmall; }

constexpr int64_t BlockBytes(int32_t format) {
  switch (format) {
    case kQ4_0: return 18;
    case kQ4_1: return 20;
    case kQ5_0: return 22;
    case kQ5_1: return 24;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    case kQ5_K: return 176;
    case kQ6_K: return 210;
    default: return 0;
  }
}

// Q4_K and Q5_K: sub-block j's 6-bit scale and minimum, packed into 12 bytes (the first four
// sub-blocks in the low 6 bits of bytes 0..7, the last four in bytes 8..11's nibbles and the
// first bytes' top 2 bits).
inline void SuperScales(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
    scales[j + 4] = (packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4);
    mins[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
  }
}

// A legacy block's 16 bytes of 4-bit codes: inputs 0..15 in the low nibbles, 16..31 in the high.
inline void SmallNibbles(const uint8_t* bytes, uint8_t* codes) {
  for (int k = 0; k < 16; ++k) {
    codes[k] = bytes[k] & 0x0F;
    codes[k + 16] = bytes[k] >> 4;
  }
}

// Q5_0 / Q5_1: bit k of the 32-bit word at `high` is input k's fifth bit.
inline void SmallHighBits(const uint8_t* high, uint8_t* codes) {
  uint32_t bits;
  std::memcpy(&bits, high, sizeof bits);
  for (int k = 0; k < 32; ++k) codes[k] |= ((bits >> k) & 1) << 4;
}

// Q4_K / Q5_K: 128 bytes of codes, each 64 inputs' first 32 in the low nibbles of 32 bytes and
// the next 32 in their high nibbles. Q5_K's fifth bits: bit r of byte l of `high` (32 bytes) for
// input 32 r + l.
inline void SuperNibbles(const uint8_t* bytes, const uint8_t* high, uint8_t* codes) {
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      codes[64 * chunk + l] = bytes[32 * chunk + l] & 0x0F;
      codes[64 * chunk + 32 + l] = bytes[32 * chunk + l] >> 4;
    }
  }
  if (high != nullptr) {
    for (int run = 0; run < 8; ++run)
      for (int l = 0; l < 32; ++l) codes[32 * run + l] |= ((high[l] >> run) & 1) << 4;
  }
}

// Q6_K: two halves of 128 inputs, each from 64 bytes of low nibbles and 32 bytes of 2-bit pairs.
inline void SixBitCodes(const uint8_t* low, const uint8_t* high, uint8_t* codes) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = low + 64 * half;
    const uint8_t* qh = high + 32 * half;
    uint8_t* out = codes + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
      out[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
      out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
}

// Byte offsets inside the K blocks.
constexpr int kQ6Low = 0, kQ6High = 128, kQ6Scales = 192, kQ6D = 208;
constexpr int kKScales = 4, kKHigh = 16;  // Q4_K/Q5_K: d, dmin, 12 bytes of scales, then (Q5_K) high bits
constexpr int64_t CodesOffset(int32_t format) {
  switch (format) {
    case kQ4_0: return 2;
    case kQ4_1: return 4;
    case kQ5_0: return 6;
    case kQ5_1: return 8;
    case kQ8_0: return 2;
    case kQ4_K: return 16;
    case kQ5_K: return 48;
    default: return 0;
  }
}

// The f32 values of one block, `BlockInputs(format)` of them.
inline void Dequantize(int32_t format, const uint8_t* block, float* out) {
  uint8_t codes[kSuper];
  const float d = format == kQ6_K ? LoadHalf(block + kQ6D) : LoadHalf(block);
  switch (format) {
    case kQ8_0:
      for (int k = 0; k < kSmall; ++k) out[k] = d * static_cast<float>(static_cast<int8_t>(block[2 + k]));
      return;
    case kQ4_0:
    case kQ4_1:
    case kQ5_0:
    case kQ5_1: {
      SmallNibbles(block + CodesOffset(format), codes);
      if (format == kQ5_0 || format == kQ5_1) SmallHighBits(block + CodesOffset(format) - 4, codes);
      const bool has_min = format == kQ4_1 || format == kQ5_1;
      const float m = has_min ? LoadHalf(block + 2) : 0.0f;
      const int offset = format == kQ4_0 ? 8 : format == kQ5_0 ? 16 : 0;
      for (int k = 0; k < kSmall; ++k) out[k] = d * static_cast<float>(codes[k] - offset) + m;
      return;
    }
    case kQ4_K:
    case kQ5_K: {
      uint8_t scales[8], mins[8];
      SuperScales(block + kKScales, scales, mins);
      SuperNibbles(block + CodesOffset(format), format == kQ5_K ? block + kKHigh : nullptr, codes);
      const float dmin = LoadHalf(block + 2);
      for (int k = 0; k < kSuper; ++k) {
        out[k] = d * static_cast<float>(scales[k / 32]) * static_cast<float>(codes[k]) -
                 dmin * static_cast<float>(mins[k / 32]);
      }
      return;
    }
    case kQ6_K: {
      SixBitCodes(block + kQ6Low, block + kQ6High, codes);
      const int8_t* scales = reinterpret_cast<const int8_t*>(block + kQ6Scales);
      for (int k = 0; k < kSuper; ++k) out[k] = d * static_cast<float>(scales[k / 16]) * static_cast<float>(codes[k] - 32);
      return;
    }
    default:
      return;
  }
}

}  // namespace pooled::gguf
