// x @ w.T for 4-bit weights in one fixed sum per output, whatever the rows: the packed forward's "q4" format.
//
// The weights are Q4_1's: a group of 32 inputs shares one step and one low, w_i = level_i * step + low, levels
// 0..15. Each row's inputs are held the way llama.cpp's Q8_1 holds them: per group, 32 int8 values q_i and one
// scale d (the group's largest |x| becomes 127), x_i ~ d * q_i. Then
//   sum_i x_i w_i ~ step * (d * sum_i q_i level_i) + low * (d * sum_i q_i),
// where sum_i q_i level_i is an integer sum: exact, so the same in any order, on any instruction set. The rest
// is three fp32 operations per output and group (a product, then two FMAs), the groups in turn, lane for lane the
// same in every build. So a row's bits depend on the row and the weights alone, whatever rows, blocks or threads
// share the call (the property LLMA's losslessness rests on), and the AVX2 build gives the AVX-512 build's bits
// by construction, not by emulating one instruction with others.
//
// Why integers: PyTorch's int4 kernel widens the weights again for every few rows, so its cost grew with each row
// a forward holds, and rows are what LLMA's drafts and other customers' replies add. A widened weight here serves
// up to 8 rows, and an integer dot product takes 4 inputs a lane (vpdpbusd on AVX512-VNNI; vpmaddubsw, 2 a lane
// into 16 bits, on AVX2), twice to four times the work of an fp32 FMA, which an AVX2 CPU needs most.
//
// Layout (decoding/weights.py q4_weight): per tile of 16 output channels and octet of inputs (8o .. 8o+7), 4 bytes
// a channel, channel after channel; byte b holds the level of input 8o+b in its low nibble and of 8o+4+b in its
// high nibble. Per tile and group, 16 steps then 16 lows in bf16.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>
#include "lanes.h"
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define LLMA_Q4_VNNI 1
#endif

namespace {

constexpr int64_t kGroup = 32;   // inputs sharing one step and one low, and one activation scale
constexpr int64_t kTile = 16;    // output channels of a tile
constexpr int64_t kOctets = kGroup / 8;
constexpr int64_t kOctetBytes = kTile * 4;

bool q4_available() {
#if defined(__AVX2__) && defined(__FMA__)
  return true;
#else
  return false;
#endif
}

#if defined(__AVX2__) && defined(__FMA__)

// The rows held as int8 per group: q (rows x k), and per row and group d (the scale) and d * sum(q) (the low's
// factor). A group with an infinity or NaN gets d = NaN, so the row's outputs are NaN as an fp32 sum would make
// them; a group whose largest |x| is so small that 127 / it overflows (below about 4e-37) is held as zeros.
struct HeldRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

void hold_rows(const uint16_t* x, int64_t rows, int64_t k, HeldRows& held) {
  const int64_t groups = k / kGroup;
  held.q.resize(rows * k);
  held.d.resize(rows * groups);
  held.s.resize(rows * groups);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* xg = x + r * k + g * kGroup;
      __m256 v[kGroup / 8];
      __m256 amax = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
      for (int i = 0; i < kGroup / 8; ++i) {
        v[i] = bf16x8(xg + 8 * i);
        const __m256 a = _mm256_and_ps(v[i], magnitude);
        finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for inf and NaN
        amax = _mm256_max_ps(amax, a);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, amax);
      float top = 0.0f;
      for (float lane : lanes) top = std::max(top, lane);  // a maximum: the same whatever the order
      const float inverse = 127.0f / top;
      int8_t* q = held.q.data() + r * k + g * kGroup;
      const int64_t at = r * groups + g;
      if (_mm256_movemask_ps(finite) != 0xFF) {
        std::fill(q, q + kGroup, int8_t(0));
        held.d[at] = held.s[at] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (top == 0.0f || !(inverse <= std::numeric_limits<float>::max())) {
        std::fill(q, q + kGroup, int8_t(0));
        held.d[at] = held.s[at] = 0.0f;
        continue;
      }
      __m256i sum = _mm256_setzero_si256();
      alignas(32) int32_t ints[kGroup];
      for (int i = 0; i < kGroup / 8; ++i) {
        // to nearest, ties to even (MXCSR's default); |x| * (127 / top) stays below 127.5
        const __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inverse)));
        sum = _mm256_add_epi32(sum, qi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(ints + 8 * i), qi);
      }
      for (int i = 0; i < kGroup; ++i) q[i] = int8_t(ints[i]);
      alignas(32) int32_t sums[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sums), sum);
      int32_t total = 0;
      for (int32_t part : sums) total += part;
      held.d[at] = top / 127.0f;
      held.s[at] = held.d[at] * static_cast<float>(total);
    }
}

// 8 floats to bf16, rounded to nearest even (a NaN stays a quiet NaN of its sign): c10's rounding, the same
// operations in every build.
inline __m128i to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i half = _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(half, half), 0x08));
}

inline void store_bf16(uint16_t* out, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_bf16(v)); }

// One group's contribution to 8 outputs of a row: total + step * (d * dot) + low * s, in this order everywhere.
inline __m256 add_group(__m256 total, __m256i dot, float d, float s, __m256 step, __m256 low) {
  const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d));
  return _mm256_fmadd_ps(_mm256_set1_ps(s), low, _mm256_fmadd_ps(scaled, step, total));
}

// The next tile's group g into L1 while this tile's is worked on: one tile's weights follow another in memory, and
// a block of rows works through a tile's levels faster than memory delivers them unless they are asked for early.
inline void prefetch_group(const uint8_t* levels, const uint16_t* scales, int64_t g) {
  for (int64_t o = 0; o < kOctets; ++o)
    _mm_prefetch(reinterpret_cast<const char*>(levels + (g * kOctets + o) * kOctetBytes), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(scales + g * 2 * kTile), _MM_HINT_T0);
}

inline int32_t four_bytes(const int8_t* q) {
  int32_t word;
  std::memcpy(&word, q, 4);
  return word;
}

#if defined(LLMA_Q4_VNNI)
constexpr int64_t kBlock = 8;  // rows sharing each widened weight: 8 sums and 8 totals in registers

inline __m512 widen_scales(const uint16_t* bf16) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// R rows x one tile, the 16 channels in one register: vpdpbusd adds 4 products of a lane's levels and the row's
// int8 inputs into its 32-bit sum. The float steps are add_group's, 16 lanes at once.
template <int R>
void tile_rows(const int8_t* q, int64_t k, const float* d, const float* s, int64_t groups, const uint8_t* levels,
               const uint16_t* scales, const uint8_t* next_levels, const uint16_t* next_scales, uint16_t* out,
               int64_t n) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    prefetch_group(next_levels, next_scales, g);
    __m512i dot[R];
    for (int r = 0; r < R; ++r) dot[r] = _mm512_setzero_si512();
    for (int64_t o = 0; o < kOctets; ++o) {
      const __m512i bytes = _mm512_loadu_si512(levels + (g * kOctets + o) * kOctetBytes);
      const __m512i lo = _mm512_and_si512(bytes, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
      for (int r = 0; r < R; ++r) {
        const int8_t* qo = q + r * k + g * kGroup + 8 * o;
        dot[r] = _mm512_dpbusd_epi32(dot[r], lo, _mm512_set1_epi32(four_bytes(qo)));
        dot[r] = _mm512_dpbusd_epi32(dot[r], hi, _mm512_set1_epi32(four_bytes(qo + 4)));
      }
    }
    const __m512 step = widen_scales(scales + g * 2 * kTile), low = widen_scales(scales + g * 2 * kTile + kTile);
    for (int r = 0; r < R; ++r) {
      const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[r]), _mm512_set1_ps(d[r * groups + g]));
      total[r] = _mm512_fmadd_ps(_mm512_set1_ps(s[r * groups + g]), low, _mm512_fmadd_ps(scaled, step, total[r]));
    }
  }
  for (int r = 0; r < R; ++r) {
    store_bf16(out + r * n, _mm512_castps512_ps256(total[r]));
    store_bf16(out + r * n + 8, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(total[r]), 1)));
  }
}
#else
constexpr int64_t kBlock = 8;  // rows sharing each widened weight: 8 sums of one half in registers

// R rows x one tile, as two halves of 8 channels, one half at a time: vpmaddubsw adds 2 products of a lane's levels
// and the row's int8 inputs into 16 bits (at most 2 x 15 x 127), 8 of them add up within the group (at most 30480,
// no saturation), and vpmaddwd adds a lane's two halves into its 32-bit sum: the integers vpdpbusd gives. A half's
// levels are widened once for all R rows, whose sums stay in registers; the totals, touched once a group, in L1.
template <int R>
void tile_rows(const int8_t* q, int64_t k, const float* d, const float* s, int64_t groups, const uint8_t* levels,
               const uint16_t* scales, const uint8_t* next_levels, const uint16_t* next_scales, uint16_t* out,
               int64_t n) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  alignas(32) float total[R][kTile] = {};
  for (int h = 0; h < 2; ++h)
    for (int64_t g = 0; g < groups; ++g) {
      if (h == 0) prefetch_group(next_levels, next_scales, g);
      __m256i dot[R];
      for (int r = 0; r < R; ++r) dot[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int64_t o = 0; o < kOctets; ++o) {
        const __m256i bytes =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + (g * kOctets + o) * kOctetBytes + 32 * h));
        const __m256i lo = _mm256_and_si256(bytes, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
        for (int r = 0; r < R; ++r) {
          const int8_t* qo = q + r * k + g * kGroup + 8 * o;
          const __m256i first = _mm256_set1_epi32(four_bytes(qo)), second = _mm256_set1_epi32(four_bytes(qo + 4));
          dot[r] = _mm256_add_epi16(dot[r], _mm256_add_epi16(_mm256_maddubs_epi16(lo, first),
                                                              _mm256_maddubs_epi16(hi, second)));
          asm("" : "+x"(dot[r]));  // keeps GCC from hoisting every product ahead of its sum (and spilling them)
        }
      }
      const __m256 step = bf16x8(scales + g * 2 * kTile + 8 * h), low = bf16x8(scales + g * 2 * kTile + kTile + 8 * h);
      for (int r = 0; r < R; ++r)
        _mm256_store_ps(total[r] + 8 * h, add_group(_mm256_load_ps(total[r] + 8 * h), _mm256_madd_epi16(dot[r], ones),
                                                    d[r * groups + g], s[r * groups + g], step, low));
    }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) store_bf16(out + r * n + 8 * h, _mm256_load_ps(total[r] + 8 * h));
}
#endif

using TileRows = void (*)(const int8_t*, int64_t, const float*, const float*, int64_t, const uint8_t*,
                          const uint16_t*, const uint8_t*, const uint16_t*, uint16_t*, int64_t);
template <int... R>
constexpr std::array<TileRows, sizeof...(R) + 1> tile_table(std::integer_sequence<int, R...>) {
  return {nullptr, tile_rows<R + 1>...};
}
constexpr auto kTileRows = tile_table(std::make_integer_sequence<int, kBlock>{});
#endif

// x (M, K) bf16; levels (N/16, K/2 * 16) uint8 and scales (N/16, K/32, 2, 16) bf16 as laid out above.
at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& levels, const at::Tensor& scales) {
  TORCH_CHECK(q4_available(), "q4_linear: built without AVX2 and FMA");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2, "q4_linear: x (M, K) in bf16");
  TORCH_CHECK(levels.scalar_type() == at::kByte && levels.is_contiguous() && levels.dim() == 2,
              "q4_linear: levels (N/16, K*8) uint8");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous(), "q4_linear: bf16 scales");
  const at::Tensor xc = x.contiguous();
  const int64_t rows = xc.size(0), k = xc.size(1), tiles = levels.size(0), n = tiles * kTile, groups = k / kGroup;
  TORCH_CHECK(k % kGroup == 0 && levels.size(1) == k / 2 * kTile && scales.numel() == n * groups * 2,
              "q4_linear: x, levels and scales do not fit together");
  at::Tensor out = at::empty({rows, n}, x.options());
#if defined(__AVX2__) && defined(__FMA__)
  HeldRows held;
  hold_rows(reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>()), rows, k, held);
  const uint8_t* lv = levels.data_ptr<uint8_t>();
  const auto* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t next = std::min(t + 1, end - 1);
      for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
        kTileRows[std::min(kBlock, rows - r0)](held.q.data() + r0 * k, k, held.d.data() + r0 * groups,
                                               held.s.data() + r0 * groups, groups, lv + t * (k / 2) * kTile,
                                               sc + t * groups * 2 * kTile, lv + next * (k / 2) * kTile,
                                               sc + next * groups * 2 * kTile, o + r0 * n + t * kTile, n);
    }
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llma, m) {
  m.def("q4_linear(Tensor x, Tensor levels, Tensor scales) -> Tensor");
  m.impl("q4_linear", c10::DispatchKey::CPU, TORCH_FN(q4_linear));
  m.def("q4_available() -> bool", TORCH_FN(q4_available));
}
