// pooled_paged_decode_attention: one decode step's attention, each row's single query token over
// the keys and values its block table points to in the page pool, plus the step's own key and value
// (not in the pool yet). The decode path of engine/layers.py `paged_attention` as an XLA CPU
// custom call (see engine/kernels/__init__.py for why).
//
//   q      f32 [B, K, G, H]    queries, G per KV head, not yet scaled by 1/sqrt(H)
//   k, v   f32 [B, K, H]       the step's own key and value
//   pools  [K, P, S, H]        keys and values: f32, or bfloat16 stored as its 16-bit pattern
//   tables s32 [B, C]          each row's pages in position order
//   filled s32 [B]             positions 0..filled-1 of each row are read from the pool
//   out    f32 [B, K*G*H]      attention output, query heads in checkpoint order (k-major)
//
// The softmax runs online, a page at a time, in float32. Threads: (row, KV head) units are shared
// with XLA's pool (parallel.h) when the step reads enough keys to be worth it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention_ops.h"
#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pooled::ExpNonPositive;
using pooled::kLanes;
using pooled::kMaxGroup;
using pooled::kMaxHeadDim;
using pooled::kMaxPage;
using pooled::Load;
using pooled::LoadVec;
using pooled::Splat;
using pooled::StoreVec;
using pooled::SumLanes;
using pooled::Vec;

// Below this many pooled keys in a step (over all rows and KV heads) one thread does it all.
constexpr int64_t kParallelKeys = 2048;

struct Shape {
  int64_t rows, kv_heads, group, head_dim, pages, page_size, columns;
};

// a·b over n floats: two partial sums eight lanes wide, then the tail. An `omp simd` reduction
// had ended each dot in seven dependent scalar adds; with it and the exponentials one at a time,
// the 30 layers' calls of a 32-row step at 96 keys took 13.3-14.1 ms (medians of 30, AMD Zen 3),
// 9.7-10.7 ms since.
inline float Dot(const float* a, const float* b, int64_t n) {
  Vec first{}, second{};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    first += LoadVec(a + i) * LoadVec(b + i);
    second += LoadVec(a + i + kLanes) * LoadVec(b + i + kLanes);
  }
  if (i + kLanes <= n) {
    first += LoadVec(a + i) * LoadVec(b + i);
    i += kLanes;
  }
  float sum = SumLanes(first + second);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// scores[i] = exp(scores[i] - peak) for i < n, eight at a time; returns their sum.
inline float ExpAndSum(float* scores, int64_t n, float peak) {
  Vec sums{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec p = ExpNonPositive(LoadVec(scores + i) - Splat(peak));
    StoreVec(scores + i, p);
    sums += p;
  }
  float sum = SumLanes(sums);
  for (; i < n; ++i) {
    scores[i] = ExpNonPositive(scores[i] - peak);
    sum += scores[i];
  }
  return sum;
}

template <typename T>
void AttendOne(const Shape& s, const float* q, const float* k_new, const float* v_new, const T* k_pool,
               const T* v_pool, const int32_t* tables, const int32_t* filled, float* out, int64_t unit) {
  const int64_t b = unit / s.kv_heads, kh = unit % s.kv_heads;
  const int64_t G = s.group, H = s.head_dim, S = s.page_size;
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  alignas(64) float queries[kMaxGroup][kMaxHeadDim];
  alignas(64) float acc[kMaxGroup][kMaxHeadDim];
  alignas(64) float key[kMaxHeadDim];
  alignas(64) float four[4][kMaxHeadDim];
  alignas(64) float scores[kMaxGroup][kMaxPage];
  float peak[kMaxGroup], total[kMaxGroup];

  // The step's own key and value first: every query sees them (its own position).
  const float* own_k = k_new + (b * s.kv_heads + kh) * H;
  const float* own_v = v_new + (b * s.kv_heads + kh) * H;
  for (int64_t g = 0; g < G; ++g) {
    const float* row = q + ((b * s.kv_heads + kh) * G + g) * H;
    for (int64_t h = 0; h < H; ++h) queries[g][h] = row[h] * inv_sqrt;
    peak[g] = Dot(queries[g], own_k, H);
    total[g] = 1.0f;
    std::memcpy(acc[g], own_v, H * sizeof(float));
  }

  const int64_t count = std::clamp<int64_t>(filled[b], 0, s.columns * S);
  for (int64_t start = 0; start < count; start += S) {
    const int64_t page = std::clamp<int64_t>(tables[b * s.columns + start / S], 0, s.pages - 1);
    const int64_t n = std::min(S, count - start);
    const T* keys = k_pool + (kh * s.pages + page) * S * H;
    const T* values = v_pool + (kh * s.pages + page) * S * H;
    for (int64_t i = 0; i < n; ++i) {
      Load(keys + i * H, key, H);
      for (int64_t g = 0; g < G; ++g) scores[g][i] = Dot(queries[g], key, H);
    }
    for (int64_t g = 0; g < G; ++g) {
      float new_peak = peak[g];
#pragma omp simd reduction(max : new_peak)
      for (int64_t i = 0; i < n; ++i) new_peak = std::max(new_peak, scores[g][i]);
      const float correction = ExpNonPositive(peak[g] - new_peak);
      total[g] = total[g] * correction + ExpAndSum(scores[g], n, new_peak);
      peak[g] = new_peak;
      for (int64_t h = 0; h < H; ++h) acc[g][h] *= correction;
    }
    // Four keys' weighted values at a time: each query's sums are read and written once per four
    // keys, not once per key (30 layers at 32 rows x 96 keys, medians of 30 alternating with the
    // key-by-key loop: 12.5-14.2 -> 10.3-10.7 ms).
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (int64_t j = 0; j < 4; ++j) Load(values + (i + j) * H, four[j], H);
      for (int64_t g = 0; g < G; ++g) {
        const float w0 = scores[g][i], w1 = scores[g][i + 1], w2 = scores[g][i + 2], w3 = scores[g][i + 3];
        for (int64_t h = 0; h < H; ++h) {
          acc[g][h] += (w0 * four[0][h] + w1 * four[1][h]) + (w2 * four[2][h] + w3 * four[3][h]);
        }
      }
    }
    for (; i < n; ++i) {
      Load(values + i * H, key, H);
      for (int64_t g = 0; g < G; ++g) {
        const float weight = scores[g][i];
        for (int64_t h = 0; h < H; ++h) acc[g][h] += weight * key[h];
      }
    }
  }
  float* result = out + (b * s.kv_heads + kh) * G * H;
  for (int64_t g = 0; g < G; ++g) {
    const float norm = 1.0f / total[g];
    for (int64_t h = 0; h < H; ++h) result[g * H + h] = acc[g][h] * norm;
  }
}

template <typename T>
void Attend(ffi::ThreadPool& pool, const Shape& s, const float* q, const float* k_new, const float* v_new,
            const T* k_pool, const T* v_pool, const int32_t* tables, const int32_t* filled, float* out) {
  int64_t keys = 0;
  for (int64_t b = 0; b < s.rows; ++b) keys += std::max<int32_t>(filled[b], 0);
  pooled::ForEachUnit(pool, s.rows * s.kv_heads, keys * s.kv_heads >= kParallelKeys, [&](int64_t unit) {
    AttendOne(s, q, k_new, v_new, k_pool, v_pool, tables, filled, out, unit);
  });
}

ffi::Error PagedDecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k_new,
                                ffi::Buffer<ffi::F32> v_new, ffi::AnyBuffer k_pool, ffi::AnyBuffer v_pool,
                                ffi::Buffer<ffi::S32> tables, ffi::Buffer<ffi::S32> filled,
                                ffi::ResultBuffer<ffi::F32> out) {
  const auto qd = q.dimensions();
  const auto pd = k_pool.dimensions();
  if (qd.size() != 4 || pd.size() != 4 || tables.dimensions().size() != 2) {
    return ffi::Error::InvalidArgument("pooled_paged_decode_attention: unexpected ranks");
  }
  const Shape s{qd[0], qd[1], qd[2], qd[3], pd[1], pd[2], tables.dimensions()[1]};
  if (pd[0] != s.kv_heads || pd[3] != s.head_dim || s.head_dim > kMaxHeadDim || s.group > kMaxGroup ||
      s.page_size > kMaxPage) {
    return ffi::Error::InvalidArgument("pooled_paged_decode_attention: unsupported shapes");
  }
  return pooled::WithPoolValues(k_pool, v_pool, "pooled_paged_decode_attention", [&](const auto* k, const auto* v) {
    Attend(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k, v, tables.typed_data(),
           filled.typed_data(), out->typed_data());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedDecodeAttention, PagedDecodeAttention,
                              pooled::AttentionBinding());
