// IEEE half-precision values (the f16 scales of GGUF blocks) to and from float.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pooled {

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

// The half nearest to `value` (ties to even), as a float: llama.cpp stores its activation blocks'
// scales as halves, and a dot that is to match its numbers multiplies by the same rounded scale.
inline float RoundToHalf(float value) {
#if defined(__F16C__)
  return _cvtsh_ss(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
#else
  return static_cast<float>(static_cast<_Float16>(value));
#endif
}

// The f16 stored at `bytes` (little-endian, possibly unaligned), as a float.
inline float LoadHalf(const uint8_t* bytes) {
  uint16_t half;
  std::memcpy(&half, bytes, sizeof half);
  return HalfToFloat(half);
}

}  // namespace pooled
