// What the paged attention kernels share: their limits, arguments and pool types, reading a page
// pool's keys and values as float32, the exponential of their online softmax, and vectors of
// eight floats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace pooled {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kMaxPage = 128;

inline void Load(const float* from, float* to, int64_t n) { std::memcpy(to, from, n * sizeof(float)); }

// bfloat16 values stored as their 16-bit patterns.
inline void Load(const uint16_t* from, float* to, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(from[i]) << 16;
    std::memcpy(&to[i], &bits, sizeof(float));
  }
}

// Calls attend(k, v) with the pools' values as float, or as bfloat16 bit patterns (uint16_t).
template <typename Attend>
xla::ffi::Error WithPoolValues(xla::ffi::AnyBuffer k_pool, xla::ffi::AnyBuffer v_pool, const std::string& kernel,
                               const Attend& attend) {
  const xla::ffi::DataType type = k_pool.element_type();
  if (type != v_pool.element_type() || (type != xla::ffi::DataType::F32 && type != xla::ffi::DataType::U16)) {
    return xla::ffi::Error::InvalidArgument(kernel + ": pools must both be f32 or bf16 bits");
  }
  if (type == xla::ffi::DataType::F32) {
    attend(k_pool.reinterpret_data<float>(), v_pool.reinterpret_data<float>());
  } else {
    attend(k_pool.reinterpret_data<uint16_t>(), v_pool.reinterpret_data<uint16_t>());
  }
  return xla::ffi::Error::Success();
}

// Both kernels' arguments: q, the step's own k and v (f32), the key and value pools, the block
// tables and one more int32 array; the result is f32.
inline auto AttentionBinding() {
  return xla::ffi::Ffi::Bind()
      .Ctx<xla::ffi::ThreadPool>()
      .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
      .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
      .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
      .Arg<xla::ffi::AnyBuffer>()
      .Arg<xla::ffi::AnyBuffer>()
      .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
      .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
      .Ret<xla::ffi::Buffer<xla::ffi::F32>>();
}

// 2^f for f in [0, 1): a degree-6 polynomial (relative error ~2e-7), in float or Vec arithmetic.
template <typename F>
inline F Exp2Fraction(F f) {
  F p = f * 1.5353362e-4f + 1.3398874e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022650e-1f;
  p = p * f + 6.9314718e-1f;
  return p * f + 1.0f;
}

constexpr float kLog2E = 1.44269504088896341f;

// exp(x) for x <= 0 (scores minus their running maximum), as straight-line arithmetic:
// 2^(x log2 e) split into an integer power set in the exponent bits and Exp2Fraction of the
// rest. Underflows to 0 below -87.
inline float ExpNonPositive(float x) {
  const float t = std::max(x, -87.0f) * kLog2E;
  const float whole = std::floor(t);
  const int32_t exponent = (static_cast<int32_t>(whole) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof(float));
  return Exp2Fraction(t - whole) * scale;
}

// Eight floats in GCC's and Clang's vector extension: one AVX register where the CPU has AVX, two
// SSE registers or scalars elsewhere, so one code path serves every CPU.
typedef float Vec __attribute__((vector_size(32)));
typedef int32_t IntVec __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

inline Vec LoadVec(const float* from) {
  Vec v;
  std::memcpy(&v, from, sizeof v);
  return v;
}

inline void StoreVec(float* to, Vec v) { std::memcpy(to, &v, sizeof v); }

inline Vec Splat(float x) { return Vec{x, x, x, x, x, x, x, x}; }

inline Vec Max(Vec a, Vec b) { return a > b ? a : b; }

// The eight lanes summed pairwise (three dependent adds, not seven).
inline float SumLanes(Vec v) {
  float lanes[kLanes];
  std::memcpy(lanes, &v, sizeof v);
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// ExpNonPositive lane by lane.
inline Vec ExpNonPositive(Vec x) {
  const Vec t = Max(x, Splat(-87.0f)) * kLog2E;
  IntVec whole = __builtin_convertvector(t, IntVec);   // toward zero: a fraction's floor is one less
  whole += __builtin_convertvector(whole, Vec) > t;    // a true comparison is -1
  const IntVec exponent = (whole + 127) << 23;
  Vec scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return Exp2Fraction(t - __builtin_convertvector(whole, Vec)) * scale;
}

}  // namespace pooled
