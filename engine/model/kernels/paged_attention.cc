// pooled_paged_decode_attention: one decode step's attention, each row's single query token over
// the keys and values its block table points to in the page pool, plus the step's own key and value
// (not in the pool yet). The decode path of engine/model/layers/paged_attention.py as an XLA CPU
// custom call (see engine/model/kernels/__init__.py for why).
//
//   q      f32 [B, K, G, H]    queries, G per KV head, not yet scaled by 1/sqrt(H)
//   k, v   f32 [B, K, H]       the step's own key and value
//   pools  [K, P, S, H]        keys and values: f32, or bfloat16 stored as its 16-bit pattern
//   tables s32 [B, C]          each row's pages in position order
//   filled s32 [B]             positions 0..filled-1 of each row are read from the pool
//   out    f32 [B, K*G*H]      attention output, query heads in checkpoint order (k-major)
//
// A unit of work is one row's KV head over one chunk of its keys (kChunkKeys): its G queries walk
// the chunk's pages in blocks of up to kMaxKeys keys (whole pages); per block, the scores of up
// to three queries at once (each key read and widened once for all of them), one online-softmax
// update in float32, then the weighted values (each value read once for all of them, the sums in
// registers across the block); the chunks' softmax states merge in chunk order at the end. The
// head size must be a multiple of 8. Threads: units are shared with XLA's pool (parallel.h) when
// the step reads enough keys to be worth it. pooled_paged_burst_attention (a step of a decode burst)
// and pooled_paged_draft_attention (a step over drafts) below run the same units over pages patched
// with the step's own keys.

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

#if defined(__AVX512F__)
// With AVX-512, head sizes of 64 and 128 take sixteen-lane paths: a unit's queries stay in
// registers over a page's keys, and its value sums over a whole block, which halves the
// instructions a key costs. The row above: 16-23 ms against 31-35 ms in eight lanes (one thread:
// 44 against 61 ms); 377 MB of keys and values, 16 ms at the machine's 23.5 GB/s.
inline __m512 LoadSixteen(const float* from) { return _mm512_loadu_ps(from); }
inline __m512 LoadSixteen(const uint16_t* from) {
  const __m512i widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}

// The low eight lanes plus the high eight.
inline Vec FoldHalves(__m512 v) {
  return Vec(_mm512_castps512_ps256(v) + _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// PageScores for H = 16 x HV.
template <int GB, int HV, typename T>
void PageScoresWide(const float (*queries)[kMaxHeadDim], const T* keys, int64_t n, float (*scores)[kMaxKeys],
                    int64_t offset) {
  constexpr int64_t H = HV * 16;
  __m512 q[GB][HV];
  for (int t = 0; t < GB; ++t)
    for (int v = 0; v < HV; ++v) q[t][v] = _mm512_loadu_ps(queries[t] + v * 16);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m512 sums[GB][4];
    for (int t = 0; t < GB; ++t)
      for (int j = 0; j < 4; ++j) sums[t][j] = _mm512_setzero_ps();
    for (int v = 0; v < HV; ++v) {
      for (int j = 0; j < 4; ++j) {
        const __m512 key = LoadSixteen(keys + (i + j) * H + v * 16);
        for (int t = 0; t < GB; ++t) sums[t][j] = _mm512_fmadd_ps(q[t][v], key, sums[t][j]);
      }
    }
    for (int t = 0; t < GB; ++t) {
      StoreSums4(FoldHalves(sums[t][0]), FoldHalves(sums[t][1]), FoldHalves(sums[t][2]), FoldHalves(sums[t][3]),
                 scores[t] + offset + i);
    }
  }
  for (; i < n; ++i) {
    __m512 sums[GB];
    for (int t = 0; t < GB; ++t) sums[t] = _mm512_setzero_ps();
    for (int v = 0; v < HV; ++v) {
      const __m512 key = LoadSixteen(keys + i * H + v * 16);
      for (int t = 0; t < GB; ++t) sums[t] = _mm512_fmadd_ps(q[t][v], key, sums[t]);
    }
    for (int t = 0; t < GB; ++t) scores[t][offset + i] = SumLanes(FoldHalves(sums[t]));
  }
}

// BlockValues for H = 16 x HV, all of each query's sums in registers over the block.
template <int GB, int HV, typename T>
void BlockValuesWide(const float (*scores)[kMaxKeys], const float* correction, const KeyBlock<T>& block,
                     float (*acc)[kMaxHeadDim]) {
  constexpr int64_t H = HV * 16;
  __m512 sums[GB][HV];
  for (int t = 0; t < GB; ++t)
    for (int v = 0; v < HV; ++v) {
      sums[t][v] = _mm512_mul_ps(_mm512_loadu_ps(acc[t] + v * 16), _mm512_set1_ps(correction[t]));
    }
  for (int64_t p = 0; p < block.pages; ++p) {
    const T* values = block.values[p];
    const int64_t n = block.PageKeys(p), first = p * block.page_size;
    for (int64_t i = 0; i < n; ++i) {
      __m512 value[HV];
      for (int v = 0; v < HV; ++v) value[v] = LoadSixteen(values + i * H + v * 16);
      for (int t = 0; t < GB; ++t) {
        const __m512 weight = _mm512_set1_ps(scores[t][first + i]);
        for (int v = 0; v < HV; ++v) sums[t][v] = _mm512_fmadd_ps(weight, value[v], sums[t][v]);
      }
    }
  }
  for (int t = 0; t < GB; ++t)
    for (int v = 0; v < HV; ++v) _mm512_storeu_ps(acc[t] + v * 16, sums[t][v]);
}
#endif

// The scores of GB queries for each page of the block.
template <int GB, typename T>
void BlockScores(const float (*queries)[kMaxHeadDim], const KeyBlock<T>& block, int64_t H, float (*scores)[kMaxKeys]) {
  for (int64_t p = 0; p < block.pages; ++p) {
    const int64_t n = block.PageKeys(p), offset = p * block.page_size;
#if defined(__AVX512F__)
    if (H == 64) {
      PageScoresWide<GB, 4>(queries, block.keys[p], n, scores, offset);
      continue;
    }
    if (H == 128) {
      PageScoresWide<GB, 8>(queries, block.keys[p], n, scores, offset);
      continue;
    }
#endif
    PageScores<GB>(queries, block.keys[p], n, H, scores, offset);
  }
}

// The block's weighted values added to GB queries' sums, scaled by `correction` first.
template <int GB, typename T>
void BlockWeightedValues(const float (*scores)[kMaxKeys], const float* correction, const KeyBlock<T>& block, int64_t H,
                         float (*acc)[kMaxHeadDim]) {
#if defined(__AVX512F__)
  if (H == 64) return BlockValuesWide<GB, 4>(scores, correction, block, acc);
  if (H == 128) return BlockValuesWide<GB, 8>(scores, correction, block, acc);
#endif
  int64_t h = 0;
  for (; h + 2 * kLanes <= H; h += 2 * kLanes) BlockValues<GB, 2>(scores, correction, block, H, h, acc);
  if (h < H) BlockValues<GB, 1>(scores, correction, block, H, h, acc);
}

// One block of keys for GB of a unit's queries: their scores, the online softmax's update, and
// the weighted values (H a multiple of 8).
template <int GB, typename T>
void AttendBlock(const float (*queries)[kMaxHeadDim], const KeyBlock<T>& block, int64_t H, float* peak, float* total,
                 float (*scores)[kMaxKeys], float (*acc)[kMaxHeadDim]) {
  BlockScores<GB>(queries, block, H, scores);
  float correction[GB];
  for (int t = 0; t < GB; ++t) {
    const float new_peak = Peak(scores[t], block.count, peak[t]);
    correction[t] = ExpNonPositive(peak[t] - new_peak);
    total[t] = total[t] * correction[t] + ExpAndSum(scores[t], block.count, new_peak);
    peak[t] = new_peak;
  }
  BlockWeightedValues<GB>(scores, correction, block, H, acc);
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

// A row's keys go in chunks of whole blocks, and one row's KV head over one chunk is a unit of
// work, so a single long row keeps every thread busy. Each chunk leaves its queries' softmax states
// (Partials), merged in chunk order once all are done. The split depends only on the row's own
// length, so a row attends the same in any batch, and the draft kernel splits alike. A row of
// 16,384 keys over 30 layers of 3 KV heads (bfloat16, Zen 4, two threads, p10 of 40 calls, a noisy
// machine): 16.0-21.3 ms in chunks of 1,024 keys, 17.5-28.4 ms in one unit per KV head (three
// units on two threads). Prefetching the next block's pages by hand cost 3-4 ms: not done.
constexpr int64_t kChunkKeys = 1024;

inline int64_t BlockKeys(int64_t page_size) { return std::max<int64_t>(1, kMaxKeys / page_size) * page_size; }

inline int64_t ChunkKeys(int64_t page_size) {
  const int64_t block = BlockKeys(page_size);
  return std::max<int64_t>(1, kChunkKeys / block) * block;
}

// The chunks of a token that sees `keys` pooled keys: at least one, the first holding its own key.
inline int64_t Chunks(int64_t keys, int64_t chunk_keys) {
  return std::max<int64_t>(1, (keys + chunk_keys - 1) / chunk_keys);
}

// Each row's first unit index over chunks: row b's chunks are first[b] .. first[b + 1] - 1.
struct ChunkIndex {
  std::vector<int64_t> first;

  int64_t Units() const { return first.back(); }
  int64_t Row(int64_t index) const {
    return std::upper_bound(first.begin(), first.end(), index) - first.begin() - 1;
  }
};

// Online-softmax states of G queries over some keys, one per slot: each query's largest score,
// the sum of exp(score - largest), and the values weighted by those exponentials.
class Partials {
 public:
  Partials(int64_t slots, int64_t group, int64_t head_dim)
      : group_(group), head_dim_(head_dim), data_(slots * group * (head_dim + 2)) {}

  float* Peaks(int64_t slot) { return &data_[slot * group_ * (head_dim_ + 2)]; }
  float* Totals(int64_t slot) { return Peaks(slot) + group_; }
  float* Sums(int64_t slot, int64_t g) { return Totals(slot) + group_ + g * head_dim_; }

  // out[g * H ...] = the states of `chunks` slots (slot, slot + stride, ...) merged in that order,
  // then normalised: with one chunk, its sums over its total.
  void Finish(int64_t slot, int64_t stride, int64_t chunks, float* out) {
    const int64_t H = head_dim_;
    for (int64_t g = 0; g < group_; ++g) {
      float peak = Peaks(slot)[g], total = Totals(slot)[g];
      float* result = out + g * H;
      std::memcpy(result, Sums(slot, g), H * sizeof(float));
      for (int64_t c = 1; c < chunks; ++c) {
        const int64_t other = slot + c * stride;
        const float other_peak = Peaks(other)[g], merged = std::max(peak, other_peak);
        const float mine = ExpNonPositive(peak - merged), theirs = ExpNonPositive(other_peak - merged);
        total = total * mine + Totals(other)[g] * theirs;
        const float* sums = Sums(other, g);
        for (int64_t h = 0; h < H; ++h) result[h] = result[h] * mine + sums[h] * theirs;
        peak = merged;
      }
      const float norm = 1.0f / total;
      for (int64_t h = 0; h < H; ++h) result[h] *= norm;
    }
  }

 private:
  int64_t group_, head_dim_;
  std::vector<float> data_;
};

// One row's pages for one KV head: the pool's, except `patched_count` columns from
// `patched_first` on, read from copies.
template <typename T>
struct RowPages {
  const T* k_pool;
  const T* v_pool;
  const int32_t* table;  // the row's block table
  int64_t kv_head, pages, page_size, head_dim;
  int64_t patched_first = 0, patched_count = 0;
  const T* patched_k = nullptr;
  const T* patched_v = nullptr;

  void Column(int64_t column, const T** keys, const T** values) const {
    const int64_t page_entries = page_size * head_dim;
    if (column >= patched_first && column < patched_first + patched_count) {
      *keys = patched_k + (column - patched_first) * page_entries;
      *values = patched_v + (column - patched_first) * page_entries;
      return;
    }
    const int64_t page = std::clamp<int64_t>(table[column], 0, pages - 1);
    *keys = k_pool + (kv_head * pages + page) * page_entries;
    *values = v_pool + (kv_head * pages + page) * page_entries;
  }
};

// One row's tokens for one KV head: `live` tokens at consecutive positions from `first`, token t
// seeing the pooled keys below min(first + t, limit), with G queries and its own key and value.
struct TokenRun {
  const float* q;      // token 0's G queries, not yet scaled
  const float* k_new;  // token 0's own key and value
  const float* v_new;
  int64_t q_stride, kv_stride;  // from one token's queries (key, value) to the next's
  int64_t first, live, limit;

  int64_t Keys(int64_t t) const { return std::clamp<int64_t>(first + t, 0, limit); }
};

// The run's tokens over chunk `chunk` of the row's keys, in blocks (each block's keys read from
// memory once, from cache for the next token): each token's queries start from their own key in
// chunk 0, from nothing in a later one. Token t's state goes to slot `slot + t`.
template <typename T>
void AttendChunk(const TokenRun& run, const RowPages<T>& pages, int64_t group, int64_t chunk, Partials& partials,
                 int64_t slot) {
  const int64_t G = group, H = pages.head_dim, S = pages.page_size;
  const int64_t block_keys = BlockKeys(S), chunk_keys = ChunkKeys(S);
  const int64_t count = run.live * G;
  thread_local std::vector<float> scratch;
  scratch.resize(count * (2 * kMaxHeadDim + kMaxKeys + 2));
  auto* queries = reinterpret_cast<float (*)[kMaxHeadDim]>(scratch.data());
  auto* acc = queries + count;
  auto* scores = reinterpret_cast<float (*)[kMaxKeys]>(acc + count);
  float* peak = scores[count];
  float* total = peak + count;

  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  for (int64_t t = 0; t < run.live; ++t) {
    const float* own_k = run.k_new + t * run.kv_stride;
    const float* own_v = run.v_new + t * run.kv_stride;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = t * G + g;
      const float* row = run.q + t * run.q_stride + g * H;
      for (int64_t h = 0; h < H; ++h) queries[i][h] = row[h] * inv_sqrt;
      if (chunk == 0) {
        peak[i] = Dot(queries[i], own_k, H);
        total[i] = 1.0f;
        std::memcpy(acc[i], own_v, H * sizeof(float));
      } else {
        peak[i] = -INFINITY;
        total[i] = 0.0f;
        std::fill_n(acc[i], H, 0.0f);
      }
    }
  }

  const int64_t start = chunk * chunk_keys, end = std::min(start + chunk_keys, run.Keys(run.live - 1));
  KeyBlock<T> block;
  block.page_size = S;
  for (int64_t from = start; from < end; from += block_keys) {
    const int64_t block_pages = (std::min(block_keys, end - from) + S - 1) / S;
    for (int64_t p = 0; p < block_pages; ++p) pages.Column(from / S + p, &block.keys[p], &block.values[p]);
    for (int64_t t = 0; t < run.live; ++t) {
      const int64_t keys = std::min(block_keys, std::min(end, run.Keys(t)) - from);
      if (keys <= 0) continue;
      block.count = keys;
      block.pages = (keys + S - 1) / S;
      for (int64_t g0 = 0; g0 < G; g0 += 3) {
        const int64_t i = t * G + g0;
        AttendBlockGroup(std::min<int64_t>(3, G - g0), queries + i, block, H, peak + i, total + i, scores + i,
                         acc + i);
      }
    }
  }
  for (int64_t t = 0; t < run.live; ++t) {
    std::copy_n(peak + t * G, G, partials.Peaks(slot + t));
    std::copy_n(total + t * G, G, partials.Totals(slot + t));
    for (int64_t g = 0; g < G; ++g) std::memcpy(partials.Sums(slot + t, g), acc[t * G + g], H * sizeof(float));
  }
}

// Stored keys and values of consecutive positions: position p's at (p - origin) * stride, for p in
// [first, end). A step's own keys that later tokens of its row see before the pool holds them.
template <typename T>
struct StepKeys {
  const T* k;
  const T* v;
  int64_t stride, origin, first, end;
};

// Copies of the row's pages in columns [first_column, end_column) holding positions of `step`,
// with its keys and values written in; `pages` reads those columns from `patched_k` and `patched_v`.
template <typename T>
void PatchStepPages(const StepKeys<T>& step, int64_t first_column, int64_t end_column, std::vector<T>& patched_k,
                    std::vector<T>& patched_v, RowPages<T>& pages) {
  const int64_t S = pages.page_size, H = pages.head_dim;
  if (step.end <= step.first) return;
  const int64_t from = std::max(first_column, step.first / S), to = std::min(end_column, (step.end - 1) / S + 1);
  if (to <= from) return;
  patched_k.resize((to - from) * S * H);
  patched_v.resize((to - from) * S * H);
  for (int64_t column = from; column < to; ++column) {
    const T *keys, *values;
    pages.Column(column, &keys, &values);
    T* k_copy = &patched_k[(column - from) * S * H];
    T* v_copy = &patched_v[(column - from) * S * H];
    std::memcpy(k_copy, keys, S * H * sizeof(T));
    std::memcpy(v_copy, values, S * H * sizeof(T));
    for (int64_t position = std::max(step.first, column * S); position < std::min(step.end, (column + 1) * S);
         ++position) {
      const int64_t entry = (position - step.origin) * step.stride;
      std::memcpy(k_copy + (position % S) * H, step.k + entry, H * sizeof(T));
      std::memcpy(v_copy + (position % S) * H, step.v + entry, H * sizeof(T));
    }
  }
  pages.patched_first = from;
  pages.patched_count = to - from;
  pages.patched_k = patched_k.data();
  pages.patched_v = patched_v.data();
}

// A burst's side buffer: each row's keys and values [B, N, K, H] of the burst's earlier steps, in
// the pools' stored form, the last `count[b]` positions below the row's token (not in the pool yet).
template <typename T>
struct SideKeys {
  const T* k;
  const T* v;
  int64_t steps;
  const int32_t* count;
};

// Decode (`side` null) or a burst step: each row's one token over its pooled keys below `filled`,
// the last `side->count` of them read from the side buffer instead.
template <typename T>
void Attend(ffi::ThreadPool& pool, const Shape& s, const float* q, const float* k_new, const float* v_new,
            const T* k_pool, const T* v_pool, const int32_t* tables, const int32_t* filled, const SideKeys<T>* side,
            float* out) {
  const int64_t K = s.kv_heads, G = s.group, H = s.head_dim, limit = s.columns * s.page_size;
  const int64_t chunk_keys = ChunkKeys(s.page_size);
  ChunkIndex index{{0}};
  int64_t keys = 0;
  for (int64_t b = 0; b < s.rows; ++b) {
    const int64_t row_keys = std::clamp<int64_t>(filled[b], 0, limit);
    index.first.push_back(index.first.back() + Chunks(row_keys, chunk_keys));
    keys += row_keys;
  }
  Partials partials(index.Units() * K, G, H);
  pooled::ForEachUnit(pool, index.Units() * K, keys * K >= kParallelKeys, [&](int64_t unit) {
    const int64_t chunk_unit = unit / K, kh = unit % K, b = index.Row(chunk_unit);
    const int64_t head = b * K + kh, chunk = chunk_unit - index.first[b];
    const TokenRun run{q + head * G * H, k_new + head * H, v_new + head * H, 0, 0, filled[b], 1, limit};
    RowPages<T> pages{k_pool, v_pool, tables + b * s.columns, kh, s.pages, s.page_size, H};
    std::vector<T> patched_k, patched_v;
    if (side != nullptr) {
      const int64_t origin = filled[b] - std::clamp<int64_t>(side->count[b], 0, side->steps);
      const int64_t entry = (b * side->steps * K + kh) * H;
      const StepKeys<T> step{side->k + entry, side->v + entry, K * H, origin, std::max<int64_t>(origin, 0),
                             run.Keys(0)};
      const int64_t columns_per_chunk = chunk_keys / s.page_size;
      PatchStepPages(step, chunk * columns_per_chunk, (chunk + 1) * columns_per_chunk, patched_k, patched_v, pages);
    }
    AttendChunk(run, pages, G, chunk, partials, unit);
  });
  for (int64_t b = 0; b < s.rows; ++b) {
    for (int64_t kh = 0; kh < K; ++kh) {
      const int64_t chunks = index.first[b + 1] - index.first[b];
      partials.Finish(index.first[b] * K + kh, K, chunks, out + (b * K + kh) * G * H);
    }
  }
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
    using T = std::remove_const_t<std::remove_pointer_t<decltype(k)>>;
    Attend<T>(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k, v, tables.typed_data(),
              filled.typed_data(), nullptr, out->typed_data());
  });
}

// --- pooled_paged_burst_attention ---------------------------------------------------------------
//
// Step j of a decode burst (several decode steps in one device call): the decode kernel, each row's
// keys at the burst's earlier positions read from the burst's side buffer, so its output is a
// decode step's at that position, bit for bit.
//
//   q, k, v, pools, tables, filled   as pooled_paged_decode_attention's
//   k_side, v_side  [B, N, K, H]    the burst's keys and values so far, in the pools' type
//   count           s32 [B]         side entries in use: positions filled - count .. filled - 1

ffi::Error PagedBurstAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k_new,
                               ffi::Buffer<ffi::F32> v_new, ffi::AnyBuffer k_side, ffi::AnyBuffer v_side,
                               ffi::AnyBuffer k_pool, ffi::AnyBuffer v_pool, ffi::Buffer<ffi::S32> tables,
                               ffi::Buffer<ffi::S32> filled, ffi::Buffer<ffi::S32> count,
                               ffi::ResultBuffer<ffi::F32> out) {
  const auto qd = q.dimensions();
  const auto pd = k_pool.dimensions();
  const auto sd = k_side.dimensions();
  if (qd.size() != 4 || pd.size() != 4 || sd.size() != 4 || tables.dimensions().size() != 2) {
    return ffi::Error::InvalidArgument("pooled_paged_burst_attention: unexpected ranks");
  }
  const Shape s{qd[0], qd[1], qd[2], qd[3], pd[1], pd[2], tables.dimensions()[1]};
  if (pd[0] != s.kv_heads || pd[3] != s.head_dim || s.head_dim > kMaxHeadDim || s.group > kMaxGroup ||
      s.page_size > kMaxPage || s.head_dim % kLanes != 0 || sd[0] != s.rows || sd[2] != s.kv_heads ||
      sd[3] != s.head_dim || k_side.element_type() != k_pool.element_type() ||
      v_side.element_type() != v_pool.element_type()) {
    return ffi::Error::InvalidArgument("pooled_paged_burst_attention: unsupported shapes");
  }
  return pooled::WithPoolValues(k_pool, v_pool, "pooled_paged_burst_attention", [&](const auto* k, const auto* v) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(k)>>;
    const SideKeys<T> side{k_side.reinterpret_data<T>(), v_side.reinterpret_data<T>(), sd[1], count.typed_data()};
    Attend<T>(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k, v, tables.typed_data(),
              filled.typed_data(), &side, out->typed_data());
  });
}

// --- pooled_paged_draft_attention ---------------------------------------------------------------
//
// A decode step over drafts: each row brings T tokens at consecutive positions (its input token,
// then its draft), and each token attends exactly as a one-token decode step at its position would:
// its own key first, then the positions below it in the same chunks and blocks of whole pages,
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
// A unit is one row's KV head over one chunk of keys, for all the row's tokens. The pages that
// hold step positions are read from copies with the step's keys written in.

struct DraftShape {
  int64_t rows, tokens, kv_heads, group, head_dim, pages, page_size, columns;
};

// Row b's tokens at consecutive positions from its first: the rest are padding.
inline int64_t LiveTokens(const DraftShape& s, const int32_t* positions, int64_t b) {
  const int32_t* row = positions + b * s.tokens;
  int64_t live = 1;
  while (live < s.tokens && row[live] == row[0] + live) ++live;
  return live;
}

template <typename T>
void AttendDraft(ffi::ThreadPool& pool, const DraftShape& s, const float* q, const float* k_new, const float* v_new,
                 const T* k_step, const T* v_step, const T* k_pool, const T* v_pool, const int32_t* tables,
                 const int32_t* positions, float* out) {
  const int64_t K = s.kv_heads, G = s.group, H = s.head_dim, T_ = s.tokens, limit = s.columns * s.page_size;
  const int64_t chunk_keys = ChunkKeys(s.page_size);
  auto run_of = [&](int64_t b, int64_t kh) {
    const int64_t head = b * T_ * K + kh;
    return TokenRun{q + head * G * H, k_new + head * H, v_new + head * H, K * G * H, K * H,
                    positions[b * T_], LiveTokens(s, positions, b), limit};
  };
  ChunkIndex index{{0}};
  int64_t keys = 0;
  for (int64_t b = 0; b < s.rows; ++b) {
    const TokenRun run = run_of(b, 0);
    index.first.push_back(index.first.back() + Chunks(run.Keys(run.live - 1), chunk_keys));
    keys += run.Keys(0);
  }
  Partials partials(index.Units() * K * T_, G, H);
  pooled::ForEachUnit(pool, index.Units() * K, keys * K >= kParallelKeys, [&](int64_t unit) {
    const int64_t chunk_unit = unit / K, kh = unit % K, b = index.Row(chunk_unit);
    const int64_t chunk = chunk_unit - index.first[b];
    const TokenRun run = run_of(b, kh);
    RowPages<T> pages{k_pool, v_pool, tables + b * s.columns, kh, s.pages, s.page_size, H};
    std::vector<T> patched_k, patched_v;
    // The step writes positions first .. first + live - 2: those a later token of the row sees.
    const int64_t entry = (b * T_ * K + kh) * H;
    const StepKeys<T> step{k_step + entry, v_step + entry, K * H, run.first,
                           std::clamp<int64_t>(run.first, 0, run.limit), run.Keys(run.live - 1)};
    const int64_t columns_per_chunk = chunk_keys / s.page_size;
    PatchStepPages(step, chunk * columns_per_chunk, (chunk + 1) * columns_per_chunk, patched_k, patched_v, pages);
    AttendChunk(run, pages, G, chunk, partials, unit * T_);
  });
  for (int64_t b = 0; b < s.rows; ++b) {
    for (int64_t kh = 0; kh < K; ++kh) {
      const TokenRun run = run_of(b, kh);
      for (int64_t t = 0; t < T_; ++t) {
        float* result = out + ((b * T_ + t) * K + kh) * G * H;
        if (t < run.live) {
          partials.Finish((index.first[b] * K + kh) * T_ + t, K * T_, Chunks(run.Keys(t), chunk_keys), result);
        } else {
          std::fill_n(result, G * H, 0.0f);
        }
      }
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
    AttendDraft(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k_step.reinterpret_data<T>(),
                v_step.reinterpret_data<T>(), k, v, tables.typed_data(), positions.typed_data(), out->typed_data());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedDecodeAttention, PagedDecodeAttention,
                              pooled::AttentionBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedBurstAttention, PagedBurstAttention,
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
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

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
