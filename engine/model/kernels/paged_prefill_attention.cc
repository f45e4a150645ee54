// pooled_paged_prefill_attention: a prompt step's attention, B rows of T step tokens each: every
// token's query heads over the keys and values its row's block table points to in the page pool,
// then over the step's own keys and values, causally by position. The many-token path of
// engine/model/layers/paged_attention.py as an XLA CPU custom call (see engine/model/kernels/__init__.py).
//
//   q          f32 [B, T, K, G, H]  queries, not yet scaled by 1/sqrt(H)
//   k, v       f32 [B, T, K, H]     the step's own keys and values
//   pools      [K, P, S, H]         keys and values: f32, or bfloat16 stored as its 16-bit pattern
//   tables     s32 [B, C]           each row's pages in position order
//   positions  s32 [B, T]           the step tokens' positions: the pool holds a row's positions below
//                                   its first one; a token sees the step's own keys at positions up
//                                   to its own (the engine puts padding tokens past every real one)
//   out        f32 [B, T, K*G*H]    attention output, query heads in checkpoint order (k-major)
//
// Flash-attention style. A unit of work is one KV head of a tile of a row's tokens: their G query
// heads each, up to kTileQueries queries, which walk the keys in blocks of kKeyBlock absolute
// positions (from the pool below the step's first position, from the step's own tokens after),
// each block's keys and values converted to float32 once for all of them. Scores and weighted values are register-tiled matmuls (kRowTile keys by 16 queries, kRowTile
// queries by 16 head dimensions); the softmax runs online in float32. The step's own keys and values are rounded
// to the pool's type first, as they will be stored, so a prompt attends alike however the engine
// splits it into chunks.
// Threads: units are shared with XLA's pool (parallel.h).

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
using pooled::Load;
using pooled::LoadVec;
using pooled::Max;
using pooled::Splat;
using pooled::StoreVec;
using pooled::Vec;

constexpr int64_t kColumns = 2 * kLanes;  // queries (scores) or head dimensions (values) per tile
constexpr int kRowTile = 6;               // keys or queries per tile: 12 accumulators, 2 operands, 1 broadcast
constexpr int64_t kKeyBlock = 64;
constexpr int64_t kTileQueries = 96;

inline int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

struct Shape {
  int64_t rows, tokens, kv_heads, group, head_dim, pages, page_size, columns;

  int64_t TileTokens() const { return std::max<int64_t>(1, kTileQueries / group); }
  int64_t Tiles() const { return (tokens + TileTokens() - 1) / TileTokens(); }
};

// A unit's working set: its queries and their running sums, and the block of keys in hand. Scores
// are kept key by key with the queries side by side, so the online softmax runs down the block's
// keys with every lane a query of its own (no sums across lanes), and keys are read as stored.
struct Work {
  int64_t queries, lanes, head_dim, width;  // lanes, width: queries, head_dim rounded up to kColumns
  std::vector<float> buffer;
  float* q;           // [head_dim][lanes]: the queries transposed, scaled by 1/sqrt(head_dim)
  float* acc;         // [queries][width]: weighted values so far
  float* scores;      // [kKeyBlock][lanes]: the block's scores, then its probabilities
  float* keys;        // [kKeyBlock][head_dim]
  float* values;      // [kKeyBlock][width]
  float* peak;        // [lanes]: each query's running maximum score
  float* total;       // [lanes]: and its running sum of probabilities
  float* correction;  // [lanes]: the block's rescaling of what came before
  std::vector<int32_t> query_position, key_position;

  Work(int64_t queries, int64_t head_dim)
      : queries(queries),
        lanes(RoundUp(queries, kColumns)),
        head_dim(head_dim),
        width(RoundUp(head_dim, kColumns)),
        buffer(head_dim * lanes + queries * width + kKeyBlock * (lanes + head_dim + width) + 3 * lanes),
        q(buffer.data()),
        acc(q + head_dim * lanes),
        scores(acc + queries * width),
        keys(scores + kKeyBlock * lanes),
        values(keys + kKeyBlock * head_dim),
        peak(values + kKeyBlock * width),
        total(peak + lanes),
        correction(total + lanes),
        query_position(lanes, -1),  // padding lanes see no key of the step's own
        key_position(kKeyBlock) {
    std::fill(peak, peak + lanes, -INFINITY);
  }
};

// scores[j][c0, c0 + 16) for keys j0 .. j0 + R.
template <int R>
struct ScoreTile {
  static void Run(Work& w, int64_t j0, int64_t c0) {
    Vec acc[R][2] = {};
    for (int64_t h = 0; h < w.head_dim; ++h) {
      const Vec q0 = LoadVec(w.q + h * w.lanes + c0), q1 = LoadVec(w.q + h * w.lanes + c0 + kLanes);
      for (int i = 0; i < R; ++i) {
        const Vec k = Splat(w.keys[(j0 + i) * w.head_dim + h]);
        acc[i][0] += k * q0;
        acc[i][1] += k * q1;
      }
    }
    for (int i = 0; i < R; ++i) {
      StoreVec(w.scores + (j0 + i) * w.lanes + c0, acc[i][0]);
      StoreVec(w.scores + (j0 + i) * w.lanes + c0 + kLanes, acc[i][1]);
    }
  }
};

// acc[r][h0, h0 + 16) += sum over the block's n keys of probability times value, queries r0 .. r0 + R.
template <int R>
struct WeightTile {
  static void Run(Work& w, int64_t r0, int64_t h0, int64_t n) {
    Vec acc[R][2];
    for (int i = 0; i < R; ++i) {
      acc[i][0] = LoadVec(w.acc + (r0 + i) * w.width + h0);
      acc[i][1] = LoadVec(w.acc + (r0 + i) * w.width + h0 + kLanes);
    }
    for (int64_t j = 0; j < n; ++j) {
      const Vec v0 = LoadVec(w.values + j * w.width + h0), v1 = LoadVec(w.values + j * w.width + h0 + kLanes);
      for (int i = 0; i < R; ++i) {
        const Vec p = Splat(w.scores[j * w.lanes + r0 + i]);
        acc[i][0] += p * v0;
        acc[i][1] += p * v1;
      }
    }
    for (int i = 0; i < R; ++i) {
      StoreVec(w.acc + (r0 + i) * w.width + h0, acc[i][0]);
      StoreVec(w.acc + (r0 + i) * w.width + h0 + kLanes, acc[i][1]);
    }
  }
};

// Tile<R>::Run(w, r0, args...) for r0 over [0, count): tiles of kRowTile, then one of the rest.
template <template <int> class Tile, typename... Args>
void OverRows(Work& w, int64_t count, Args... args) {
  int64_t r0 = 0;
  for (; r0 + kRowTile <= count; r0 += kRowTile) Tile<kRowTile>::Run(w, r0, args...);
  switch (count - r0) {
    case 5: Tile<5>::Run(w, r0, args...); break;
    case 4: Tile<4>::Run(w, r0, args...); break;
    case 3: Tile<3>::Run(w, r0, args...); break;
    case 2: Tile<2>::Run(w, r0, args...); break;
    case 1: Tile<1>::Run(w, r0, args...); break;
    default: break;
  }
}

// Folds the block in hand (n keys; `masked`: some query must not see some of its keys) into w.
void Attend(Work& w, int64_t n, bool masked) {
  for (int64_t c0 = 0; c0 < w.lanes; c0 += kColumns) OverRows<ScoreTile>(w, n, c0);
  const Vec hidden = Splat(-INFINITY);
  for (int64_t c = 0; c < w.lanes; c += kLanes) {
    const Vec before = LoadVec(w.peak + c);
    Vec peak = before;
    pooled::IntVec seen;
    std::memcpy(&seen, w.query_position.data() + c, sizeof seen);
    for (int64_t j = 0; j < n; ++j) {
      Vec scores = LoadVec(w.scores + j * w.lanes + c);
      if (masked) {
        scores = pooled::IntVec{} + w.key_position[j] > seen ? hidden : scores;
        StoreVec(w.scores + j * w.lanes + c, scores);
      }
      peak = Max(peak, scores);
    }
    // Exactly 1 where the block raised no peak: a query that sees none of its keys, or has seen no
    // key yet (a peak of -inf), is left as it was, so skipping a block changes nothing.
    const Vec correction = peak == before ? Splat(1.0f) : ExpNonPositive(before - peak);
    Vec sums{};
    for (int64_t j = 0; j < n; ++j) {
      const Vec scores = LoadVec(w.scores + j * w.lanes + c);
      const Vec p = scores == hidden ? Vec{} : ExpNonPositive(scores - peak);
      StoreVec(w.scores + j * w.lanes + c, p);
      sums += p;
    }
    StoreVec(w.total + c, LoadVec(w.total + c) * correction + sums);
    StoreVec(w.peak + c, peak);
    StoreVec(w.correction + c, correction);
  }
  for (int64_t r = 0; r < w.queries; ++r) {
    const float correction = w.correction[r];
    float* acc = w.acc + r * w.width;
    if (correction != 1.0f) {
      for (int64_t h = 0; h < w.head_dim; ++h) acc[h] *= correction;
    }
  }
  for (int64_t h0 = 0; h0 < w.width; h0 += kColumns) OverRows<WeightTile>(w, w.queries, h0, n);
}

// Rounds float32 values to the pool's type and back: the step's own keys and values as stored.
inline void AsStored(const float* from, float* to, int64_t n, float) { std::memcpy(to, from, n * sizeof(float)); }

inline void AsStored(const float* from, float* to, int64_t n, uint16_t) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &from[i], sizeof bits);
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;  // to nearest, ties to even
    std::memcpy(&to[i], &bits, sizeof bits);
  }
}

template <typename T>
void AttendTile(const Shape& s, const float* q, const float* k_new, const float* v_new, const T* k_pool,
                const T* v_pool, const int32_t* tables, const int32_t* positions, float* out, int64_t unit) {
  const int64_t tiles = s.Tiles(), b = unit / (s.kv_heads * tiles), kh = unit / tiles % s.kv_heads;
  const int64_t t0 = unit % tiles * s.TileTokens(), t1 = std::min(s.tokens, t0 + s.TileTokens());
  const int64_t G = s.group, H = s.head_dim, S = s.page_size, K = s.kv_heads;
  const int32_t* row_positions = positions + b * s.tokens;
  Work w((t1 - t0) * G, H);
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(H));
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r = (t - t0) * G + g;
      const float* query = q + (((b * s.tokens + t) * K + kh) * G + g) * H;
      for (int64_t h = 0; h < H; ++h) w.q[h * w.lanes + r] = query[h] * inv_sqrt;
      w.query_position[r] = row_positions[t];
    }
  }
  const int32_t last_query = *std::max_element(row_positions + t0, row_positions + t1);
  const int32_t first_query = *std::min_element(row_positions + t0, row_positions + t1);

  // Keys in blocks of absolute positions (0, kKeyBlock, ...), each key from the pool below the
  // row's first step position and from the step's own tokens from there: however a prompt is
  // split into chunks or served from cached pages, a query meets its keys in the same blocks and
  // order, so its sums are the same. Padding tokens (past every real position) are no key.
  const int64_t in_pool = std::clamp<int64_t>(row_positions[0], 0, s.columns * S);
  int64_t own = 0;
  while (own < s.tokens && row_positions[own] == in_pool + own) ++own;
  const int64_t keys = std::min<int64_t>(in_pool + own, last_query + 1);
  for (int64_t start = 0; start < keys; start += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, keys - start);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t position = start + j;
      if (position < in_pool) {
        const int64_t page = std::clamp<int64_t>(tables[b * s.columns + position / S], 0, s.pages - 1);
        const int64_t at = ((kh * s.pages + page) * S + position % S) * H;
        Load(k_pool + at, w.keys + j * H, H);
        Load(v_pool + at, w.values + j * w.width, H);
      } else {
        const int64_t at = ((b * s.tokens + position - in_pool) * K + kh) * H;
        AsStored(k_new + at, w.keys + j * H, H, T{});
        AsStored(v_new + at, w.values + j * w.width, H, T{});
      }
      w.key_position[j] = static_cast<int32_t>(position);
    }
    Attend(w, n, start + n - 1 > first_query);
  }

  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r = (t - t0) * G + g;
      const float norm = 1.0f / w.total[r];
      float* result = out + ((b * s.tokens + t) * K + kh) * G * H + g * H;
      for (int64_t h = 0; h < H; ++h) result[h] = w.acc[r * w.width + h] * norm;
    }
  }
}

template <typename T>
void AttendAll(ffi::ThreadPool& pool, const Shape& s, const float* q, const float* k_new, const float* v_new,
               const T* k_pool, const T* v_pool, const int32_t* tables, const int32_t* positions, float* out) {
  const int64_t units = s.rows * s.kv_heads * s.Tiles();
  const bool parallel = s.rows * s.tokens * s.kv_heads * s.group * s.head_dim >= pooled::kParallelWork;
  pooled::ForEachUnit(pool, units, parallel, [&](int64_t unit) {
    AttendTile(s, q, k_new, v_new, k_pool, v_pool, tables, positions, out, unit);
  });
}

ffi::Error PagedPrefillAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k_new,
                                 ffi::Buffer<ffi::F32> v_new, ffi::AnyBuffer k_pool, ffi::AnyBuffer v_pool,
                                 ffi::Buffer<ffi::S32> tables, ffi::Buffer<ffi::S32> positions,
                                 ffi::ResultBuffer<ffi::F32> out) {
  const auto qd = q.dimensions();
  const auto pd = k_pool.dimensions();
  if (qd.size() != 5 || pd.size() != 4 || tables.dimensions().size() != 2 || positions.dimensions().size() != 2) {
    return ffi::Error::InvalidArgument("pooled_paged_prefill_attention: unexpected ranks");
  }
  const Shape s{qd[0], qd[1], qd[2], qd[3], qd[4], pd[1], pd[2], tables.dimensions()[1]};
  if (pd[0] != s.kv_heads || pd[3] != s.head_dim || s.head_dim > pooled::kMaxHeadDim || s.group > pooled::kMaxGroup ||
      s.page_size > pooled::kMaxPage || s.tokens < 1 ||
      positions.dimensions()[0] != s.rows || positions.dimensions()[1] != s.tokens) {
    return ffi::Error::InvalidArgument("pooled_paged_prefill_attention: unsupported shapes");
  }
  return pooled::WithPoolValues(k_pool, v_pool, "pooled_paged_prefill_attention", [&](const auto* k, const auto* v) {
    AttendAll(pool, s, q.typed_data(), k_new.typed_data(), v_new.typed_data(), k, v, tables.typed_data(),
              positions.typed_data(), out->typed_data());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PooledPagedPrefillAttention, PagedPrefillAttention,
                              pooled::AttentionBinding());
