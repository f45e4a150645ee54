// Small SIMD helpers shared by the matmul kernels.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pooled {

// How far ahead of the tile being read weights are prefetched (into L2). A tile's rows are short (a
// few hundred bytes each), too short for the hardware prefetcher to ramp up on. One-row decode step
// of the default model (w8a8, AVX-512 Xeon), scratch timing: no prefetch 13.5 ms for the projections
// alone; whole step 8.9-9.0 ms prefetching 1 KiB ahead into L1, 8.1-8.3 with 4 KiB, 7.7-8.0 with
// 16 KiB, 7.5-7.7 with 16 KiB into L2, 8.0-8.2 with 32 KiB into L2.
constexpr int64_t kPrefetchBytes = 16384;

#if defined(__AVX2__)

inline __m256i Load32(const void* bytes) { return _mm256_loadu_si256(static_cast<const __m256i*>(bytes)); }

// The sum of the 8 lanes.
inline int32_t Sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// The sum of the 8 lanes, always in the same order.
inline float Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Prefetches `Lines` cache lines `kPrefetchBytes` past `step_start`. A tile reads its channels' rows
// side by side, so a step that reads L lines of them prefetches L lines ahead, keeping pace.
template <int Lines>
inline void Prefetch(const void* step_start) {
  const char* ahead = static_cast<const char*>(step_start) + kPrefetchBytes;
  for (int line = 0; line < Lines; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T1);
}

#endif

}  // namespace pooled
