// pooled_paged_decode_attention: one decode step's attention, each row's single query token over
// the keys and values its block table points to in the page pool, plus the step's own key and value
// (not in the pool yet). The decode path of engine/layers/paged_attention.py as an XLA CPU
// custom call (see engine/kernels/__init__.py for why).
//
//   q      f32 [B, K, G, H]    queries, G per KV head, not yet scaled by 1/sqrt(H)
//   k, v   f32 [B, K, H]       the step's own key and value
//   pools  [K, P, S, H]        keys and values: f32, or bfloat16 stored as its 16-bit pattern
//   tables s32 [B, C]          each row's pages in position order
//   filled s32 [B]             positions 0..filled-1 of each row are read from the pool
//   out    f32 [B, K*G*H]      attention output, query heads in checkpoint order (k-major)
//
// A unit of work is one row's KV head: its G queries walk the row's pages in blocks of up to
// kMaxKeys keys (whole pages); per block, the scores of up to three queries at once (each key read
// and widened once for all of them), one online-softmax update in float32, then the weighted
// values (each value read once for all of them, the sums in registers across the block). The head
// size must be a multiple of 8. Threads: units are shared with XLA's pool (parallel.h) when the
// step reads enough keys to be worth it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "attention_ops.h"
#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pooled::ExpNonPositive;
using pooled::IntVec;
using pooled::kLanes;
using pooled::kMaxGroup;
using pooled::kMaxHeadDim;
using pooled::kMaxPage;
using pooled::LoadVec;
using pooled::Max;
using pooled::Splat;
using pooled::StoreVec;
using pooled::SumLanes;
using pooled::Vec;

// Keys per block. A page at a time (16 keys by default), the softmax's update and the value sums'
// loads and stores took a third of the time. The 30 layers' calls of a 32-row step at 96 keys
// (AMD Zen 3, alternating): one thread, min of 8, 7.35 ms before this layout, 5.03 with it a page
// at a time, 4.08 in blocks; jitted on two threads, medians of 30, 9.4-11.2 -> 3.6-4.7 ms, and one
// row at 3,000 keys 10.1-10.7 -> 3.8-4.2 ms.
constexpr int64_t kMaxKeys = 128;
static_assert(kMaxKeys >= kMaxPage, "a block holds a whole page");

// Below this many pooled keys in a step (over all rows and KV heads) one thread does it all.
constexpr int64_t kParallelKeys = 2048;

struct Shape {
  int64_t rows, kv_heads, group, head_dim, pages, page_size, columns;
};

// a·b over n floats (a query and the step's own key): two partial sums eight lanes wide, then the
// tail.
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

// Eight keys' or values' entries as floats. With AVX2 one widening instruction: GCC 12 compiles the
// vector-extension conversion below into two half-width widenings and an insert.
inline Vec LoadEight(const float* from) { return LoadVec(from); }
inline Vec LoadEight(const uint16_t* from) {
#if defined(__AVX2__)
  const __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
  return Vec(_mm256_castsi256_ps(_mm256_slli_epi32(widened, 16)));
#else
  typedef uint16_t Halves __attribute__((vector_size(16)));
  Halves halves;
  std::memcpy(&halves, from, sizeof halves);
  const IntVec bits = __builtin_convertvector(halves, IntVec) << 16;
  Vec v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

// The lane sums of four vectors: {sum(a), sum(b), sum(c), sum(d)}.
inline void StoreSums4(Vec a, Vec b, Vec c, Vec d, float* out) {
#if defined(__AVX__)
  const __m256 ab = _mm256_hadd_ps(__m256(a), __m256(b)), cd = _mm256_hadd_ps(__m256(c), __m256(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
#else
  out[0] = SumLanes(a), out[1] = SumLanes(b), out[2] = SumLanes(c), out[3] = SumLanes(d);
#endif
}

// scores[t][offset + i] = queries[t] · key i for GB queries (H a multiple of 8) and the n keys of
// a page: four keys at a time, their products summed lane-wise in 4 x GB registers, each key's entries
// loaded (and widened from bfloat16) once for all GB queries.
template <int GB, typename T>
void PageScores(const float (*queries)[kMaxHeadDim], const T* keys, int64_t n, int64_t H, float (*scores)[kMaxKeys],
                int64_t offset) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Vec sums[GB][4] = {};
    for (int64_t h = 0; h < H; h += kLanes) {
      for (int j = 0; j < 4; ++j) {
        const Vec key = LoadEight(keys + (i + j) * H + h);
        for (int t = 0; t < GB; ++t) sums[t][j] += LoadVec(queries[t] + h) * key;
      }
    }
    for (int t = 0; t < GB; ++t) StoreSums4(sums[t][0], sums[t][1], sums[t][2], sums[t][3], scores[t] + offset + i);
  }
  for (; i < n; ++i) {
    Vec sums[GB] = {};
    for (int64_t h = 0; h < H; h += kLanes) {
      const Vec key = LoadEight(keys + i * H + h);
      for (int t = 0; t < GB; ++t) sums[t] += LoadVec(queries[t] + h) * key;
    }
    for (int t = 0; t < GB; ++t) scores[t][offset + i] = SumLanes(sums[t]);
  }
}

// The keys and values of consecutive pages of a row's block table, up to kMaxKeys of them.
template <typename T>
struct KeyBlock {
  const T* keys[kMaxKeys];  // a page holds at least one key
  const T* values[kMaxKeys];
  int64_t pages = 0, page_size = 0, count = 0;

  int64_t PageKeys(int64_t p) const { return std::min(page_size, count - p * page_size); }
};

// acc[t] = acc[t] * correction[t] + sum_i scores[t][i] * value i, for GB queries (H a multiple of
// 8) over the block's values: CH x 8 dimensions at a time, each query's sums in registers over
// all its values, each value's entries loaded (and widened) once for all GB queries.
template <int GB, int CH, typename T>
void BlockValues(const float (*scores)[kMaxKeys], const float* correction, const KeyBlock<T>& block, int64_t H,
                 int64_t h, float (*acc)[kMaxHeadDim]) {
  Vec sums[GB][CH];
  for (int t = 0; t < GB; ++t)
    for (int c = 0; c < CH; ++c) sums[t][c] = LoadVec(acc[t] + h + c * kLanes) * Splat(correction[t]);
  for (int64_t p = 0; p < block.pages; ++p) {
    const T* values = block.values[p] + h;
    const int64_t n = block.PageKeys(p), first = p * block.page_size;
    for (int64_t i = 0; i < n; ++i) {
      Vec value[CH];
      for (int c = 0; c < CH; ++c) value[c] = LoadEight(values + i * H + c * kLanes);
      for (int t = 0; t < GB; ++t) {
        const Vec weight = Splat(scores[t][first + i]);
        for (int c = 0; c < CH; ++c) sums[t][c] += weight * value[c];
      }
    }
  }
  for (int t = 0; t < GB; ++t)
    for (int c = 0; c < CH; ++c) StoreVec(acc[t] + h + c * kLanes, sums[t][c]);
}

// The largest of n scores.
inline float Peak(const float* scores, int64_t n, float peak) {
  Vec peaks = Splat(peak);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) peaks = Max(peaks, LoadVec(scores + i));
  float lanes[kLanes];
  std::memcpy(lanes, &peaks, sizeof lanes);
  for (int j = 0; j < kLanes; ++j) peak = std::max(peak, lanes[j]);
  for (; i < n; ++i) peak = std::max(peak, scores[i]);
  return peak;
}

// One block of keys for GB of a unit's queries: their scores, the online softmax's update, and
// the weighted values (H a multiple of 8).
template <int GB, typename T>
void AttendBlock(const float (*queries)[kMaxHeadDim], const KeyBlock<T>& block, int64_t H, float* peak, float* total,
                 float (*scores)[kMaxKeys], float (*acc)[kMaxHeadDim]) {
  for (int64_t p = 0; p < block.pages; ++p) {
    PageScores<GB>(queries, block.keys[p], block.PageKeys(p), H, scores, p * block.page_size);
  }
  float correction[GB];
  for (int t = 0; t < GB; ++t) {
    const float new_peak = Peak(scores[t], block.count, peak[t]);
    correction[t] = ExpNonPositive(peak[t] - new_peak);
    total[t] = total[t] * correction[t] + ExpAndSum(scores[t], block.count, new_peak);
    peak[t] = new_peak;
  }
  int64_t h = 0;
  for (; h + 2 * kLanes <= H; h += 2 * kLanes) BlockValues<GB, 2>(scores, correction, block, H, h, acc);
  if (h < H) BlockValues<GB, 1>(scores, correction, block, H, h, acc);
}

// The block for `count` (<= 3: twelve score sums in registers) of a unit's queries.
template <typename T>
void AttendBlockGroup(int64_t count, const float (*queries)[kMaxHeadDim], const KeyBlock<T>& block, int64_t H,
                      float* peak, float* total, float (*scores)[kMaxKeys], float (*acc)[kMaxHeadDim]) {
  switch (count) {
    case 3: AttendBlock<3>(queries, block, H, peak, total, scores, acc); break;
    case 2: AttendBlock<2>(queries, block, H, peak, total, scores, acc); break;
    default: AttendBlock<1>(queries, block, H, peak, total, scores, acc); break;
  }
}

template <typename T>
void AttendOne(const Shape& s, const float* q, const float* k_new, const float* v_new, const T* k_pool,
               const T* v_pool, const int32_t* tables, const int32_t* filled, float* out, int64_t unit) {
  const int64_t b = unit / s.kv_heads, kh = unit % s.kv_heads;
  const int64_t G = s.group, H = s.head_dim, S = s.page_size;
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  alignas(64) float queries[kMaxGroup][kMaxHeadDim];
  alignas(64) float acc[kMaxGroup][kMaxHeadDim];
  alignas(64) float scores[kMaxGroup][kMaxKeys];
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
  const int64_t block_keys = std::max<int64_t>(1, kMaxKeys / S) * S;
  KeyBlock<T> block;
  block.page_size = S;
  for (int64_t start = 0; start < count; start += block_keys) {
    block.count = std::min(block_keys, count - start);
    block.pages = (block.count + S - 1) / S;
    for (int64_t p = 0; p < block.pages; ++p) {
      const int64_t page = std::clamp<int64_t>(tables[b * s.columns + start / S + p], 0, s.pages - 1);
      block.keys[p] = k_pool + (kh * s.pages + page) * S * H;
      block.values[p] = v_pool + (kh * s.pages + page) * S * H;
    }
    for (int64_t g0 = 0; g0 < G; g0 += 3) {
      AttendBlockGroup(std::min<int64_t>(3, G - g0), queries + g0, block, H, peak + g0, total + g0, scores + g0,
                       acc + g0);
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
      s.page_size > kMaxPage || s.head_dim % kLanes != 0) {
    return ffi::Error::InvalidArgument("pooled_paged_decode_attention: unsupported shapes");
  }
  return pooled::WithPoolValues(k_pool, v_pool, "pooled_paged_decode_attention", [&](const auto* k, const auto* v) {
    Attend(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k, v, tables.typed_data(),
           filled.typed_data(), out->typed_data());
  });
}

// --- pooled_paged_draft_attention ---------------------------------------------------------------
//
// A decode step over drafts: each row brings T tokens at consecutive positions (its input token,
// then its draft), and each token attends exactly as a one-token decode step at its position would
// (AttendOne): its own key first, then the positions below it in the same blocks of whole pages,
// where the positions from the row's first step token on come from the step's own keys as the pool
// will store them. The same floats in the same order, so a token's output is the decode step's bit
// for bit, and a draft the row takes leaves its tokens as decoding them one at a time would.
//
//   q              f32 [B, T, K, G, H]
//   k, v           f32 [B, T, K, H]     the step's own keys and values
//   k_step, v_step [B, T, K, H]         the same in the pools' type (bfloat16 bits or f32)
//   pools          [K, P, S, H]
//   tables         s32 [B, C]
//   positions      s32 [B, T]           a row's tokens from its first position on, one apart; a token
//                                       anywhere else is padding, and its output is zeros
//   out            f32 [B, T, K*G*H]
//
// A unit is one row's KV head: its tokens take each block of keys in turn (read from memory once,
// from cache for the next token), each up to its own position. The pages that hold step positions
// are read from copies with the step's keys written in.

struct DraftShape {
  int64_t rows, tokens, kv_heads, group, head_dim, pages, page_size, columns;
};

template <typename T>
void AttendDraftRow(const DraftShape& s, const float* q, const float* k_new, const float* v_new, const T* k_step,
                    const T* v_step, const T* k_pool, const T* v_pool, const int32_t* tables, const int32_t* positions,
                    float* out, int64_t unit) {
  const int64_t b = unit / s.kv_heads, kh = unit % s.kv_heads;
  const int64_t G = s.group, H = s.head_dim, S = s.page_size, K = s.kv_heads;
  const int32_t* row_positions = positions + b * s.tokens;
  const int64_t first = row_positions[0];
  int64_t live = 1;  // tokens at first, first + 1, ...: the rest are padding
  while (live < s.tokens && row_positions[live] == first + live) ++live;

  const int64_t queries_count = live * G;
  std::vector<float> query_rows(queries_count * kMaxHeadDim), acc_rows(queries_count * kMaxHeadDim);
  std::vector<float> score_rows(queries_count * kMaxKeys), peak(queries_count), total(queries_count);
  auto* queries = reinterpret_cast<float (*)[kMaxHeadDim]>(query_rows.data());
  auto* acc = reinterpret_cast<float (*)[kMaxHeadDim]>(acc_rows.data());
  auto* scores = reinterpret_cast<float (*)[kMaxKeys]>(score_rows.data());
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  for (int64_t t = 0; t < live; ++t) {
    const float* own_k = k_new + ((b * s.tokens + t) * K + kh) * H;
    const float* own_v = v_new + ((b * s.tokens + t) * K + kh) * H;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = t * G + g;
      const float* row = q + (((b * s.tokens + t) * K + kh) * G + g) * H;
      for (int64_t h = 0; h < H; ++h) queries[i][h] = row[h] * inv_sqrt;
      peak[i] = Dot(queries[i], own_k, H);
      total[i] = 1.0f;
      std::memcpy(acc[i], own_v, H * sizeof(float));
    }
  }

  // Copies of the pages holding positions first .. first + live - 2 (the step keys some token sees).
  const int64_t limit = s.columns * S;
  const int64_t seen_end = std::clamp<int64_t>(first + live - 1, 0, limit);
  const int64_t first_page = std::clamp<int64_t>(first, 0, limit) / S;
  const int64_t patched_pages = seen_end > first ? (seen_end - 1) / S - first_page + 1 : 0;
  std::vector<T> patched_k(patched_pages * S * H), patched_v(patched_pages * S * H);
  for (int64_t p = 0; p < patched_pages; ++p) {
    const int64_t column = first_page + p;
    const int64_t page = std::clamp<int64_t>(tables[b * s.columns + column], 0, s.pages - 1);
    std::memcpy(&patched_k[p * S * H], k_pool + (kh * s.pages + page) * S * H, S * H * sizeof(T));
    std::memcpy(&patched_v[p * S * H], v_pool + (kh * s.pages + page) * S * H, S * H * sizeof(T));
    for (int64_t position = std::max(first, column * S); position < std::min(seen_end, (column + 1) * S); ++position) {
      const int64_t from = ((b * s.tokens + (position - first)) * K + kh) * H;
      std::memcpy(&patched_k[(p * S + position % S) * H], k_step + from, H * sizeof(T));
      std::memcpy(&patched_v[(p * S + position % S) * H], v_step + from, H * sizeof(T));
    }
  }

  const int64_t block_keys = std::max<int64_t>(1, kMaxKeys / S) * S;
  KeyBlock<T> block;
  block.page_size = S;
  for (int64_t start = 0; start < seen_end; start += block_keys) {
    const int64_t block_pages = (std::min(block_keys, seen_end - start) + S - 1) / S;
    for (int64_t p = 0; p < block_pages; ++p) {
      const int64_t column = start / S + p;
      if (column >= first_page && column < first_page + patched_pages) {
        block.keys[p] = &patched_k[(column - first_page) * S * H];
        block.values[p] = &patched_v[(column - first_page) * S * H];
      } else {
        const int64_t page = std::clamp<int64_t>(tables[b * s.columns + column], 0, s.pages - 1);
        block.keys[p] = k_pool + (kh * s.pages + page) * S * H;
        block.values[p] = v_pool + (kh * s.pages + page) * S * H;
      }
    }
    // Token t sees the keys below first + t; its G queries go in threes, as a decode step's do
    // (one block's keys stay in cache from one token to the next).
    for (int64_t t = 0; t < live; ++t) {
      const int64_t count = std::min(block_keys, std::clamp<int64_t>(first + t, 0, limit) - start);
      if (count <= 0) continue;
      block.count = count;
      block.pages = (count + S - 1) / S;
      for (int64_t g0 = 0; g0 < G; g0 += 3) {
        const int64_t i = t * G + g0;
        AttendBlockGroup(std::min<int64_t>(3, G - g0), queries + i, block, H, &peak[i], &total[i], scores + i,
                         acc + i);
      }
    }
  }
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* result = out + ((b * s.tokens + t) * K + kh) * G * H;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = t * G + g;
      const float norm = t < live ? 1.0f / total[i] : 0.0f;
      for (int64_t h = 0; h < H; ++h) result[g * H + h] = t < live ? acc[i][h] * norm : 0.0f;
    }
  }
}

ffi::Error PagedDraftAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k_new,
                               ffi::Buffer<ffi::F32> v_new, ffi::AnyBuffer k_step, ffi::AnyBuffer v_step,
                               ffi::AnyBuffer k_pool, ffi::AnyBuffer v_pool, ffi::Buffer<ffi::S32> tables,
                               ffi::Buffer<ffi::S32> positions, ffi::ResultBuffer<ffi::F32> out) {
  const auto qd = q.dimensions();
  const auto pd = k_pool.dimensions();
  if (qd.size() != 5 || pd.size() != 4 || tables.dimensions().size() != 2 || positions.dimensions().size() != 2) {
    return ffi::Error::InvalidArgument("pooled_paged_draft_attention: unexpected ranks");
  }
  const DraftShape s{qd[0], qd[1], qd[2], qd[3], qd[4], pd[1], pd[2], tables.dimensions()[1]};
  if (pd[0] != s.kv_heads || pd[3] != s.head_dim || s.head_dim > kMaxHeadDim || s.group > kMaxGroup ||
      s.page_size > kMaxPage || s.head_dim % kLanes != 0 || k_step.element_type() != k_pool.element_type() ||
      v_step.element_type() != v_pool.element_type()) {
    return ffi::Error::InvalidArgument("pooled_paged_draft_attention: unsupported shapes");
  }
  return pooled::WithPoolValues(k_pool, v_pool, "pooled_paged_draft_attention", [&](const auto* k, const auto* v) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(k)>>;
    const T* ks = k_step.reinterpret_data<T>();
    const T* vs = v_step.reinterpret_data<T>();
    int64_t keys = 0;
    for (int64_t b = 0; b < s.rows; ++b) keys += std::max<int32_t>(positions.typed_data()[b * s.tokens], 0);
    pooled::ForEachUnit(pool, s.rows * s.kv_heads, keys * s.kv_heads >= kParallelKeys, [&](int64_t unit) {
      AttendDraftRow(s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), ks, vs, k, v, tables.typed_data(),
                     positions.typed_data(), out->typed_data(), unit);
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedDecodeAttention, PagedDecodeAttention,
                              pooled::AttentionBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedDraftAttention, PagedDraftAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
