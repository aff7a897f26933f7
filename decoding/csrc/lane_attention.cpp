// Decode-step attention for every lane of a shared forward in one call (PackedLlama's "lane kernel").
//
// Each reply (lane) attends over its own KV cache, so a forward of N replies made N attention calls per layer
// (SDPA: 70-120 us each on 2 cores, most of it not arithmetic). Here one call per layer takes every lane's rows:
// it rotates each row's query and key (rotary), writes the block's keys and values into the lane's cache, and
// computes each query row's softmax(q k / sqrt(d)) v over exactly the keys at or before its position (within
// the sliding window, if any). Sums run in fp32, in one fixed order per row: a row's bits depend on its own
// query and its own lane's keys only, never on how many rows, lanes or threads share the call (SDPA rounds a
// one-row query unlike the same row among others, and its sums change with the key count). Prompt chunks attend
// through it too (PackedLlama.prefill_attention).
// Built on the machine at first use (decoding/lane_kernel.py) with -march=native: AVX-512 where the CPU has it,
// else AVX2 (16 lanes in two registers, the AVX-512 path's operations lane for lane: the same bits), plain loops
// elsewhere; a build is one fixed rule, so a deployment's replies do not change while it runs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>
#include <algorithm>

#include "lanes.h"

namespace {

using llma_lanes::to_f;
template <typename T> inline T from_f(float x);
template <> inline float from_f<float>(float x) { return x; }
template <> inline c10::BFloat16 from_f<c10::BFloat16>(float x) { return c10::BFloat16(x); }  // round to nearest even

// exp for x <= 0 (Cephes expf): range reduction by ln 2, a degree-5 polynomial, 2^n from the exponent bits.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale; std::memcpy(&scale, &bits, 4);
  return y * scale;
}

constexpr int kLanes = 16;  // partial sums per dot product: one AVX-512 register of floats

template <typename T>
inline float dot(const float* q, const T* k, int64_t dim) {
  float acc[kLanes] = {0};
  for (int64_t d = 0; d < dim; ++d) acc[d % kLanes] += q[d] * to_f(k[d]);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
  return acc[0];
}


#if defined(LLMA_VEC16)
using llma_lanes::Vec16;
using llma_lanes::add16;
using llma_lanes::fmadd16;
using llma_lanes::fnmadd16;
using llma_lanes::load16;
using llma_lanes::mul16;
using llma_lanes::set16;
using llma_lanes::store16;
#endif

// One query row's score against one key: the same operations in the same order on every path, so a row's
// bits never depend on which rows share its call.
template <typename T>
inline float score(const float* q, const T* k, int64_t dim) {
#if defined(LLMA_VEC16)
  if (dim % 16 == 0) {
    Vec16 s = mul16(load16(q), load16(k));
    for (int64_t d = 16; d < dim; d += 16) s = fmadd16(load16(q + d), load16(k + d), s);
    return llma_lanes::reduce_add16(s);
  }
#endif
  return dot(q, k, dim);
}

// The input a rotary embedding pairs with input d of a head of 2 * half: (d + half) % (2 * half), without a 64-bit
// division for every input of every row.
inline int64_t rotary_partner(int64_t d, int64_t half) { return d < half ? d + half : d - half; }

constexpr int kChunk = 4;  // a lone lane's rows are cut into tasks of at least this many (run)
constexpr int kValueRows = 6;  // query rows that share each loaded value: 24 of the 32 AVX-512 registers

#if defined(LLMA_AVX512)
// The 16 lane sums of 16 keys' scores (s[j]: key j's products, summed lane by lane) reduced to one float each,
// key j in lane j, by exactly the additions _mm512_reduce_add_ps makes for one key (lanes i + i+8, then i + i+4,
// then T[0] + T[2] and T[1] + T[3], then those two; GCC's avx512fintrin.h), in the same pairs and order. So a
// score is the same bits as `score` gives, for about half its shuffles and a quarter of its adds.
inline __m512 reduce16(const __m512* s) {
  __m512 u[8], v[4], w[2];
  for (int m = 0; m < 8; ++m)  // key 2m in lanes 0-7, key 2m+1 in lanes 8-15: high half + low half
    u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0xEE),
                         _mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0x44));
  for (int p = 0; p < 4; ++p)  // block c: key 4p+c, lanes 4-7 + lanes 0-3
    v[p] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0xDD),
                         _mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0x88));
  for (int r = 0; r < 2; ++r)  // block c: (T[0] + T[2], T[1] + T[3]) of keys 8r+c, 8r+4+c
    w[r] = _mm512_add_ps(_mm512_shuffle_ps(v[2 * r], v[2 * r + 1], 0x44),
                         _mm512_shuffle_ps(v[2 * r], v[2 * r + 1], 0xEE));
  // lane 4c+e: key c+4e, its T[0] + T[1]
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

// One query row's scores against 16 keys (kf: 16 rows of Dim floats), as `score` computes each (Dim % 16 == 0).
template <int64_t Dim>
inline __m512 scores16(const float* q, const float* kf) {
  __m512 s[16];
  const __m512 q0 = _mm512_loadu_ps(q);
  for (int j = 0; j < 16; ++j) s[j] = _mm512_mul_ps(q0, _mm512_loadu_ps(kf + j * Dim));
  for (int64_t d = 16; d < Dim; d += 16) {
    const __m512 qd = _mm512_loadu_ps(q + d);
    for (int j = 0; j < 16; ++j) s[j] = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kf + j * Dim + d), s[j]);
  }
  return reduce16(s);
}
#endif

#if defined(LLMA_AVX2)
// The 8 lane sums u[j] (key j's products, lanes 0-7 + lanes 8-15) reduced to one float each, key j in lane j, by
// the additions reduce_add16 makes after its first (upper 4 + lower 4, then lanes 0 + 2 and 1 + 3, then those
// two), in the same pairs and order: the bits `score` gives, as reduce16 does for AVX-512.
inline __m256 reduce8(const __m256* u) {
  __m256 v[4], w[2];
  for (int m = 0; m < 4; ++m)  // key 2m in lanes 0-3, key 2m+1 in lanes 4-7: upper 4 + lower 4
    v[m] = _mm256_add_ps(_mm256_permute2f128_ps(u[2 * m], u[2 * m + 1], 0x31),
                         _mm256_permute2f128_ps(u[2 * m], u[2 * m + 1], 0x20));
  for (int r = 0; r < 2; ++r)  // keys 4r, 4r+2 in lanes 0-3, 4r+1, 4r+3 in 4-7: (T[0] + T[2], T[1] + T[3]) each
    w[r] = _mm256_add_ps(_mm256_shuffle_ps(v[2 * r], v[2 * r + 1], 0x44),
                         _mm256_shuffle_ps(v[2 * r], v[2 * r + 1], 0xEE));
  // keys 0, 2, 4, 6 in lanes 0-3 and 1, 3, 5, 7 in lanes 4-7: T[0] + T[1] each
  const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
  return _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One query row's scores against 8 keys (kf: 8 rows of Dim floats), as `score` computes each (Dim % 16 == 0);
// 4 keys at a time, so their 8 registers of sums and the query's fit the 16 AVX2 registers.
template <int64_t Dim>
inline __m256 scores8(const float* q, const float* kf) {
  __m256 u[8];
  for (int half = 0; half < 2; ++half) {
    const float* kh = kf + half * 4 * Dim;
    Vec16 s[4];
    const Vec16 q0 = load16(q);
    for (int j = 0; j < 4; ++j) s[j] = mul16(q0, load16(kh + j * Dim));
    for (int64_t d = 16; d < Dim; d += 16) {
      const Vec16 qd = load16(q + d);
      for (int j = 0; j < 4; ++j) s[j] = fmadd16(qd, load16(kh + j * Dim + d), s[j]);
    }
    for (int j = 0; j < 4; ++j) u[4 * half + j] = _mm256_add_ps(s[j].hi, s[j].lo);
  }
  return reduce8(u);
}
#endif

#if defined(LLMA_AVX512)
inline __m512 floor16(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
// 2^n for whole numbers n in float, from the exponent bits
inline __m512 pow2_16(__m512 n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
#elif defined(LLMA_AVX2)
inline Vec16 floor16(Vec16 x) { return {_mm256_floor_ps(x.lo), _mm256_floor_ps(x.hi)}; }
inline __m256 pow2_8(__m256 n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline Vec16 pow2_16(Vec16 n) { return {pow2_8(n.lo), pow2_8(n.hi)}; }
#endif

#if defined(LLMA_VEC16)
inline Vec16 exp16(Vec16 x) {  // exp_nonpositive, 16 at a time
  x = llma_lanes::max16(x, set16(-87.0f));
  Vec16 n = floor16(fmadd16(x, set16(1.44269504088896341f), set16(0.5f)));
  Vec16 r = fnmadd16(n, set16(0.693359375f), x);
  r = fmadd16(n, set16(2.12194440e-4f), r);
  Vec16 p = set16(1.9875691500e-4f);
  p = fmadd16(p, r, set16(1.3981999507e-3f));
  p = fmadd16(p, r, set16(8.3334519073e-3f));
  p = fmadd16(p, r, set16(4.1665795894e-2f));
  p = fmadd16(p, r, set16(1.6666665459e-1f));
  p = fmadd16(p, r, set16(5.0000001201e-1f));
  Vec16 y = add16(fmadd16(p, mul16(r, r), r), set16(1.0f));
  return mul16(y, pow2_16(n));
}
#endif

// Softmax weights of one row's scores sc[0..n) in place (n rounded up to 16 is writable); returns their sum.
inline float softmax_weights(float* sc, int64_t n) {
#if defined(LLMA_VEC16)
  const int64_t padded = (n + 15) / 16 * 16;
  for (int64_t i = n; i < padded; ++i) sc[i] = -INFINITY;
  Vec16 mx = set16(-INFINITY);
  for (int64_t i = 0; i < padded; i += 16) mx = llma_lanes::max16(mx, load16(sc + i));
  const Vec16 m = set16(llma_lanes::reduce_max16(mx));
  Vec16 total = llma_lanes::zero16();
  for (int64_t i = 0; i < padded; i += 16) {
    const Vec16 p = llma_lanes::keep_first16(exp16(llma_lanes::sub16(load16(sc + i), m)), std::min<int64_t>(16, n - i));
    store16(sc + i, p);
    total = add16(total, p);
  }
  return llma_lanes::reduce_add16(total);
#else
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = sc[i] > mx ? sc[i] : mx;
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) { sc[i] = exp_nonpositive(sc[i] - mx); total += sc[i]; }
  return total;
#endif
}

// acc (dim) += w * v (dim): the same operations for a row on every path.
template <typename T>
inline void add_weighted(float* acc, float w, const T* v, int64_t dim) {
#if defined(LLMA_VEC16)
  if (dim % 16 == 0) {
    const Vec16 wv = set16(w);
    for (int64_t d = 0; d < dim; d += 16) store16(acc + d, fmadd16(wv, load16(v + d), load16(acc + d)));
    return;
  }
#endif
  for (int64_t d = 0; d < dim; ++d) acc[d] += w * to_f(v[d]);
}

// A thread's own float buffer `which` of at least n floats, kept between calls: a prompt chunk's scores take some
// 0.5 MB, which a fresh vector would take from the system (page faults) and zero on every call. A later call with
// the same `which` may move the buffer: each is taken once per attend_group (0: scores, 1: values).
constexpr int64_t kKeptFloats = int64_t(1) << 22;  // 16 MB: what a thread keeps; a bigger buffer goes after its call

inline std::vector<float>* scratch_buffers() {
  static thread_local std::vector<float> buffers[2];
  return buffers;
}

inline float* scratch(int which, int64_t n) {
  std::vector<float>& buffer = scratch_buffers()[which];
  if (int64_t(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// After a call that needed more than kKeptFloats (a whole long prompt in one forward: some 270 MB of scores for
// 8,192 tokens), give that memory back instead of keeping it for the thread's lifetime.
inline void trim_scratch() {
  for (int which = 0; which < 2; ++which) {
    std::vector<float>& buffer = scratch_buffers()[which];
    if (int64_t(buffer.size()) > kKeptFloats) std::vector<float>().swap(buffer);
  }
}

#if defined(LLMA_AVX512)
// Rows' scores 16 keys at a time, the keys widened to floats once for all rows (scores16).
template <int64_t Dim, typename T>
void row_scores16(const float* q, int64_t n_q, const int64_t* lo, const int64_t* hi, int64_t lo_all, int64_t hi_all,
                  int64_t span, const T* kc, float* scores) {
  alignas(64) float kf[16 * Dim];
  for (int64_t b = lo_all; b < hi_all; b += 16) {
    const int64_t nb = std::min<int64_t>(16, hi_all - b);
    for (int64_t j = 0; j < 16; ++j)
      for (int64_t d = 0; d < Dim; d += 16)
        _mm512_store_ps(kf + j * Dim + d, j < nb ? load16(kc + (b + j) * Dim + d) : _mm512_setzero_ps());
    for (int64_t a = 0; a < n_q; ++a) {
      const int64_t from = std::max(b, lo[a]), to = std::min(b + 16, hi[a]);
      if (from >= to) continue;
      // lanes from-b .. to-b of this block are row a's keys; it stores them at its offsets i - lo[a]
      const __mmask16 keep = __mmask16(((1u << (to - b)) - 1) & ~((1u << (from - b)) - 1));
      _mm512_mask_storeu_ps(scores + a * span + (b - lo[a]), keep, scores16<Dim>(q + a * Dim, kf));
    }
  }
}
#endif

#if defined(LLMA_AVX2)
// Rows' scores 8 keys at a time, the keys widened to floats once for all rows (scores8).
template <int64_t Dim, typename T>
void row_scores8(const float* q, int64_t n_q, const int64_t* lo, const int64_t* hi, int64_t lo_all, int64_t hi_all,
                 int64_t span, const T* kc, float* scores) {
  alignas(32) float kf[8 * Dim];
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t b = lo_all; b < hi_all; b += 8) {
    const int64_t nb = std::min<int64_t>(8, hi_all - b);
    for (int64_t j = 0; j < 8; ++j)
      for (int64_t d = 0; d < Dim; d += 16) store16(kf + j * Dim + d, j < nb ? load16(kc + (b + j) * Dim + d)
                                                                             : llma_lanes::zero16());
    for (int64_t a = 0; a < n_q; ++a) {
      const int64_t from = std::max(b, lo[a]), to = std::min(b + 8, hi[a]);
      if (from >= to) continue;
      // lanes from-b .. to-b of this block are row a's keys; it stores them at its offsets i - lo[a]
      const __m256i keep = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(to - b)), lane),
                                            _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(int32_t(from - b) - 1)));
      _mm256_maskstore_ps(scores + a * span + (b - lo[a]), keep, scores8<Dim>(q + a * Dim, kf));
    }
  }
}
#endif

template <typename T>
void row_scores_key_by_key(const float* q, int64_t n_q, int64_t dim, const int64_t* lo, const int64_t* hi,
                           int64_t span, const T* kc, float* scores) {
  for (int64_t a = 0; a < n_q; ++a)
    for (int64_t i = lo[a]; i < hi[a]; ++i) scores[a * span + (i - lo[a])] = score(q + a * dim, kc + i * dim, dim);
}

// The scores of n_q query rows (q: n_q x dim floats) against their keys: row a's against keys lo[a]..hi[a] at
// scores[a * span ..]. With a head size of 64 or 128, 16 keys at a time on AVX-512 (row_scores16), 8 on AVX2
// (row_scores8); else key by key (score). All give every score the same bits.
template <typename T>
void row_scores(const float* q, int64_t n_q, int64_t dim, const int64_t* lo, const int64_t* hi, int64_t lo_all,
                int64_t hi_all, int64_t span, const T* kc, float* scores) {
#if defined(LLMA_AVX512)
  if (dim == 64) return row_scores16<64>(q, n_q, lo, hi, lo_all, hi_all, span, kc, scores);
  if (dim == 128) return row_scores16<128>(q, n_q, lo, hi, lo_all, hi_all, span, kc, scores);
#elif defined(LLMA_AVX2)
  if (dim == 64) return row_scores8<64>(q, n_q, lo, hi, lo_all, hi_all, span, kc, scores);
  if (dim == 128) return row_scores8<128>(q, n_q, lo, hi, lo_all, hi_all, span, kc, scores);
#endif
  row_scores_key_by_key(q, n_q, dim, lo, hi, span, kc, scores);
}

#if defined(LLMA_AVX512)
// add_weighted's operations for Rows rows (head size 64) over keys c_lo..c_hi, in registers: row a's weight of key
// i is w[a * span + i - lo[a]], its sums acc[a * 64 ..]; the values vf from key lo_all, widened to floats.
template <int Rows>
void value_rows_of(float* acc, const float* w, int64_t span, const int64_t* lo, const float* vf, int64_t lo_all,
                   int64_t c_lo, int64_t c_hi) {
  __m512 av[Rows][4];
  for (int a = 0; a < Rows; ++a)
    for (int d = 0; d < 4; ++d) av[a][d] = _mm512_loadu_ps(acc + a * 64 + 16 * d);
  for (int64_t i = c_lo; i < c_hi; ++i) {
    const float* vr = vf + (i - lo_all) * 64;
    const __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16), v2 = _mm512_loadu_ps(vr + 32),
                 v3 = _mm512_loadu_ps(vr + 48);
    for (int a = 0; a < Rows; ++a) {
      const __m512 wv = _mm512_set1_ps(w[a * span + (i - lo[a])]);
      av[a][0] = _mm512_fmadd_ps(wv, v0, av[a][0]);
      av[a][1] = _mm512_fmadd_ps(wv, v1, av[a][1]);
      av[a][2] = _mm512_fmadd_ps(wv, v2, av[a][2]);
      av[a][3] = _mm512_fmadd_ps(wv, v3, av[a][3]);
    }
  }
  for (int a = 0; a < Rows; ++a)
    for (int d = 0; d < 4; ++d) _mm512_storeu_ps(acc + a * 64 + 16 * d, av[a][d]);
}

inline void value_rows(int rows, float* acc, const float* w, int64_t span, const int64_t* lo, const float* vf,
                       int64_t lo_all, int64_t c_lo, int64_t c_hi) {
  static_assert(kValueRows == 6, "one case per chunk size");
  switch (rows) {
    case 1: return value_rows_of<1>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
    case 2: return value_rows_of<2>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
    case 3: return value_rows_of<3>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
    case 4: return value_rows_of<4>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
    case 5: return value_rows_of<5>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
    default: return value_rows_of<6>(acc, w, span, lo, vf, lo_all, c_lo, c_hi);
  }
}
#elif defined(LLMA_AVX2)
// add_weighted's operations for `rows` rows (head size 64) over keys c_lo..c_hi, one row's 64 sums at a time in 8
// of the 16 AVX2 registers; arguments as value_rows_of's. The keys go by in spans of kValueSpan, every row taking
// its turn on a span while its values are in L1: 256 keys' values (64 KB) outgrow L1, and a row reading all of them
// before the next would stream them from L2, which delivers them slower than the FMAs use them.
constexpr int64_t kValueSpan = 32;  // 8 KB of values

inline void value_rows(int rows, float* acc, const float* w, int64_t span, const int64_t* lo, const float* vf,
                       int64_t lo_all, int64_t c_lo, int64_t c_hi) {
  for (int64_t i0 = c_lo; i0 < c_hi; i0 += kValueSpan) {
    const int64_t i1 = std::min(i0 + kValueSpan, c_hi);
    for (int a = 0; a < rows; ++a) {
      __m256 av[8];
      for (int d = 0; d < 8; ++d) av[d] = _mm256_loadu_ps(acc + a * 64 + 8 * d);
      const float* wa = w + a * span - lo[a];
      for (int64_t i = i0; i < i1; ++i) {
        const float* vr = vf + (i - lo_all) * 64;
        const __m256 wv = _mm256_set1_ps(wa[i]);
        for (int d = 0; d < 8; ++d) av[d] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr + 8 * d), av[d]);
      }
      for (int d = 0; d < 8; ++d) _mm256_storeu_ps(acc + a * 64 + 8 * d, av[d]);
    }
  }
}
#endif

// The rows of query heads group*kvh.. of one lane (T rows each) against that lane's keys of kv head kvh.
// Every query row's score with a key is the same operations whichever rows share the call, and its weighted
// values are summed over its keys in ascending order on every path: a row's bits never depend on its company.
template <typename T>
void attend_group(const T* x, int64_t width, int64_t first, int64_t n_rows, int64_t start, int64_t heads,
                  int64_t group, int64_t kvh, int64_t dim, int64_t window, float scale, const T* kc, const T* vc,
                  const T* ct, const T* st, T* o) {
  const int64_t half = dim / 2, n_q = group * n_rows;
  std::vector<float> q(n_q * dim), acc(n_q * dim, 0.0f), sum(n_q, 0.0f);
  std::vector<int64_t> lo(n_q), hi(n_q);
  for (int64_t a = 0; a < n_q; ++a) {
    int64_t h = kvh * group + a / n_rows, t = a % n_rows, pos = start + t;
    const T* qin = x + (first + t) * width + h * dim;
    const T* c = ct + pos * dim; const T* s = st + pos * dim;
    for (int64_t d = 0; d < dim; ++d)
      q[a * dim + d] = (to_f(qin[d]) * to_f(c[d]) + to_f(qin[rotary_partner(d, half)]) * to_f(s[d])) * scale;
    hi[a] = pos + 1;
    lo[a] = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  }
  const int64_t lo_all = *std::min_element(lo.begin(), lo.end()), hi_all = *std::max_element(hi.begin(), hi.end());
  const int64_t span = (hi_all - lo_all + 15) / 16 * 16;
  // Each row's scores (a row's own segment of `span` floats, past 16 of front room for masked stores).
  float* scores = scratch(0, 16 + n_q * span) + 16;
  row_scores(q.data(), n_q, dim, lo.data(), hi.data(), lo_all, hi_all, span, kc, scores);
  for (int64_t a = 0; a < n_q; ++a) sum[a] = softmax_weights(scores + a * span, hi[a] - lo[a]);
#if defined(LLMA_VEC16)
  // The values widened to floats once for all rows (the rows' chunks read them from here, not each anew).
  float* vf = nullptr;
  if (dim == 64) {
    vf = scratch(1, (hi_all - lo_all) * dim);
    for (int64_t i = lo_all; i < hi_all; ++i)
      for (int64_t d = 0; d < dim; d += 16) store16(vf + (i - lo_all) * dim + d, load16(vc + i * dim + d));
  }
#endif
  for (int64_t a0 = 0; a0 < n_q; a0 += kValueRows) {
    const int64_t na = std::min<int64_t>(kValueRows, n_q - a0);
    int64_t c_lo = *std::max_element(lo.begin() + a0, lo.begin() + a0 + na);
    int64_t c_hi = *std::min_element(hi.begin() + a0, hi.begin() + a0 + na);
    bool fast = false;
#if defined(LLMA_VEC16)
    fast = dim == 64 && c_lo < c_hi;
#endif
    if (!fast) c_lo = c_hi = hi_all;  // every key on the per-row path
    auto slow_values = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t a = a0; a < a0 + na; ++a)
          if (i >= lo[a] && i < hi[a]) add_weighted(acc.data() + a * dim, scores[a * span + (i - lo[a])], vc + i * dim, dim);
    };
    slow_values(lo_all, c_lo);
#if defined(LLMA_VEC16)
    if (fast) value_rows(int(na), acc.data() + a0 * dim, scores + a0 * span, span, lo.data() + a0, vf, lo_all, c_lo, c_hi);
#endif
    slow_values(c_hi, hi_all);
  }
  for (int64_t a = 0; a < n_q; ++a) {
    int64_t h = kvh * group + a / n_rows, t = a % n_rows;
    T* orow = o + (first + t) * heads * dim + h * dim;
    const float inv = 1.0f / sum[a];
    for (int64_t d = 0; d < dim; ++d) orow[d] = from_f<T>(acc[a * dim + d] * inv);
  }
  trim_scratch();
}

template <typename T>
void run(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, c10::List<at::Tensor> keys,
         c10::List<at::Tensor> values, at::IntArrayRef sizes, at::IntArrayRef starts, int64_t heads,
         int64_t kv_heads, int64_t window, double scale, at::Tensor& out) {
  const int64_t dim = cos.size(-1), half = dim / 2, lanes = sizes.size(), group = heads / kv_heads;
  const int64_t width = qkv.size(1);
  std::vector<int64_t> first(lanes + 1, 0);
  for (int64_t j = 0; j < lanes; ++j) first[j + 1] = first[j] + sizes[j];
  std::vector<T*> kp(lanes), vp(lanes);
  std::vector<int64_t> cache_len(lanes);
  for (int64_t j = 0; j < lanes; ++j) {
    at::Tensor k = keys.get(j), v = values.get(j);
    kp[j] = k.data_ptr<T>(); vp[j] = v.data_ptr<T>(); cache_len[j] = k.size(2);
  }
  const T* x = qkv.data_ptr<T>();
  const T* ct = cos.data_ptr<T>();
  const T* st = sin.data_ptr<T>();
  T* o = out.data_ptr<T>();
  // First every lane's rows' keys (rotated) and values into its cache: a row attends over the keys of the rows
  // before it in its own block too, so all are written before any row attends. Little work: no threads.
  for (int64_t j = 0; j < lanes; ++j)
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      T* kc = kp[j] + kvh * cache_len[j] * dim;
      T* vc = vp[j] + kvh * cache_len[j] * dim;
      for (int64_t r = first[j]; r < first[j + 1]; ++r) {
        const int64_t pos = starts[j] + (r - first[j]);
        const T* kin = x + r * width + (heads + kvh) * dim;
        const T* vin = x + r * width + (heads + kv_heads + kvh) * dim;
        const T* c = ct + pos * dim;
        const T* s = st + pos * dim;
        for (int64_t d = 0; d < dim; ++d)
          kc[pos * dim + d] = from_f<T>(to_f(kin[d]) * to_f(c[d]) + to_f(kin[rotary_partner(d, half)]) * to_f(s[d]));
        std::copy(vin, vin + dim, vc + pos * dim);
      }
    }
  // Then one task per lane, kv head and block of rows: the query heads sharing that kv head, for those rows. One
  // lane alone (a prefill chunk, one reply's step) has only kv_heads tasks, which 2 threads split 2:1, so its rows
  // are cut into blocks until there are some 4 tasks a thread. A row's sums are its own whatever rows share its
  // task (attend_group), so the cut changes no bit.
  const int64_t threads = at::get_num_threads(), per_part = lanes * kv_heads;
  const int64_t max_rows = *std::max_element(sizes.begin(), sizes.end());
  const int64_t parts = std::max<int64_t>(1, std::min((4 * threads + per_part - 1) / per_part,
                                                      (max_rows + kChunk - 1) / kChunk));
  struct Task { int64_t lane, kvh, from, to; };
  std::vector<Task> tasks;
  for (int64_t j = 0; j < lanes; ++j) {
    const int64_t block = (sizes[j] + parts - 1) / parts;
    for (int64_t kvh = 0; kvh < kv_heads; ++kvh)
      for (int64_t t0 = 0; t0 < sizes[j]; t0 += block) tasks.push_back({j, kvh, t0, std::min(sizes[j], t0 + block)});
  }
  at::parallel_for(0, int64_t(tasks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const Task& task = tasks[it];
      const int64_t j = task.lane;
      attend_group<T>(x, width, first[j] + task.from, task.to - task.from, starts[j] + task.from, heads, group,
                      task.kvh, dim, window, float(scale), kp[j] + task.kvh * cache_len[j] * dim,
                      vp[j] + task.kvh * cache_len[j] * dim, ct, st, o);
    }
  });
}

at::Tensor lane_attention(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                          c10::List<at::Tensor> keys, c10::List<at::Tensor> values, at::IntArrayRef sizes,
                          at::IntArrayRef starts, int64_t heads, int64_t kv_heads, int64_t window, double scale) {
  TORCH_CHECK(qkv.is_contiguous() && cos.is_contiguous() && sin.is_contiguous(), "lane_attention: contiguous inputs");
  TORCH_CHECK(qkv.scalar_type() == at::kBFloat16 || qkv.scalar_type() == at::kFloat, "lane_attention: bf16 or fp32");
  TORCH_CHECK(keys.size() == sizes.size() && values.size() == sizes.size() && starts.size() == sizes.size(),
              "lane_attention: one cache, size and start per lane");
  for (size_t j = 0; j < keys.size(); ++j) {
    const at::Tensor k = keys.get(j), v = values.get(j);
    TORCH_CHECK(k.is_contiguous() && v.is_contiguous() && k.scalar_type() == qkv.scalar_type() &&
                v.scalar_type() == qkv.scalar_type() && k.dim() == 4 && k.size(2) >= starts[j] + sizes[j] &&
                cos.size(0) >= starts[j] + sizes[j], "lane_attention: lane ", j, "'s cache or rotary table");
  }
  at::Tensor out = at::empty({qkv.size(0), heads * cos.size(-1)}, qkv.options());
  if (qkv.scalar_type() == at::kBFloat16)
    run<c10::BFloat16>(qkv, cos, sin, keys, values, sizes, starts, heads, kv_heads, window, scale, out);
  else
    run<float>(qkv, cos, sin, keys, values, sizes, starts, heads, kv_heads, window, scale, out);
  return out;
}

// Every row of q (N, D) scored against every key of k (M, D), float32, as attend_group scores them: by blocks of
// keys (`by_sixteen`: 16 keys at a time on AVX-512, 8 on AVX2, for D 64 or 128) or key by key. For the tests that hold the two to the same bits (the
// replies stored before the 16-key path came must verify as they were decoded).
at::Tensor key_scores(const at::Tensor& q, const at::Tensor& k, bool by_sixteen) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && q.dim() == 2 && k.dim() == 2 && q.size(1) == k.size(1) &&
              q.size(1) > 0 && q.size(1) % 16 == 0 && q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat,
              "key_scores: q (N, D), k (M, D), float32, D a multiple of 16");
  const int64_t n = q.size(0), m = k.size(0), dim = q.size(1), span = (m + 15) / 16 * 16;
  std::vector<int64_t> lo(n, 0), hi(n, m);
  std::vector<float> room(16 + n * span);
  float* scores = room.data() + 16;
  if (by_sixteen)
    row_scores<float>(q.data_ptr<float>(), n, dim, lo.data(), hi.data(), 0, m, span, k.data_ptr<float>(), scores);
  else
    row_scores_key_by_key<float>(q.data_ptr<float>(), n, dim, lo.data(), hi.data(), span, k.data_ptr<float>(), scores);
  at::Tensor out = at::empty({n, m}, q.options());
  for (int64_t a = 0; a < n; ++a) std::copy(scores + a * span, scores + a * span + m, out.data_ptr<float>() + a * m);
  return out;
}

// RMS norm of each row of x (N, H): x * weight / sqrt(mean(x^2) + eps), in fp32 and rounded once. F.rms_norm
// upcasts and rounds in several aten calls (some 29 us a call for one bundled-model row, 61 calls a step: a sixth
// of a one-row step); here a row is one pass. Its sum of squares runs in a fixed order per row, so a row's bits
// do not depend on the other rows.
template <typename T>
void rms_rows(const T* x, const T* w, T* out, int64_t rows, int64_t hidden, float eps) {
  auto one_row = [&](int64_t r) {
    const T* xr = x + r * hidden;
    float acc[kLanes] = {0};
    for (int64_t i = 0; i < hidden; ++i) acc[i % kLanes] += to_f(xr[i]) * to_f(xr[i]);
    for (int v = kLanes / 2; v > 0; v /= 2)
      for (int i = 0; i < v; ++i) acc[i] += acc[i + v];
    const float inv = 1.0f / std::sqrt(acc[0] / float(hidden) + eps);
    T* o = out + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) o[i] = from_f<T>(to_f(xr[i]) * inv * to_f(w[i]));
  };
  if (rows < 8) {  // a few rows cost less than waking the other threads
    for (int64_t r = 0; r < rows; ++r) one_row(r);
    return;
  }
  at::parallel_for(0, rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) one_row(r);
  });
}

std::string vector_paths() { return llma_lanes::vector_paths(); }

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && x.dim() == 2 && weight.dim() == 1 &&
              x.size(1) == weight.size(0) && x.scalar_type() == weight.scalar_type() &&
              (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat), "rms_norm: x (N, H), weight (H)");
  at::Tensor out = at::empty_like(x);
  if (x.scalar_type() == at::kBFloat16)
    rms_rows<c10::BFloat16>(x.data_ptr<c10::BFloat16>(), weight.data_ptr<c10::BFloat16>(),
                            out.data_ptr<c10::BFloat16>(), x.size(0), x.size(1), float(eps));
  else
    rms_rows<float>(x.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1),
                    float(eps));
  return out;
}

}  // namespace

TORCH_LIBRARY(llma, m) {
  m.def("lane_attention(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!)[] keys, Tensor(b!)[] values, int[] sizes, "
        "int[] starts, int heads, int kv_heads, int window, float scale) -> Tensor");
  m.impl("lane_attention", c10::DispatchKey::CPU, TORCH_FN(lane_attention));
  m.def("key_scores(Tensor q, Tensor k, bool by_sixteen) -> Tensor");
  m.impl("key_scores", c10::DispatchKey::CPU, TORCH_FN(key_scores));
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.impl("rms_norm", c10::DispatchKey::CPU, TORCH_FN(rms_norm));
  m.def("vector_paths() -> str", TORCH_FN(vector_paths));
}
