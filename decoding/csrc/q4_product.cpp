// x @ w.T for 4-bit weights in one fixed sum per output, whatever the rows: the packed forward's "q4" format.
//
// PyTorch's int4 kernel widens the weights again for every few rows, so its cost grew with each row a forward
// holds (the bundled model's products, AMD EPYC, 2 threads: 1/8/32 rows 3.7/11.2/48.3 ms), and rows are what
// LLMA's drafts and other customers' replies add. Here 16 output channels sit in the 16 lanes of a register:
// their 4-bit levels of two inputs are widened once (a table lookup to bf16, exact for 0..15) and taken by up
// to 8 rows at once through AVX512-BF16 dot products (vdpbf16ps), so a widened weight serves every row of the
// block (same shapes: 3.6/7.0/25.6 ms). A group of 32 inputs shares one step and one low (Q4_1's layout), so
//   sum_i x_i (level_i * step + low) = step * sum_i x_i level_i + low * sum_i x_i,
// the first sum in the dot products, the second once per row and group. Every output's sums run in one order
// (inputs in pairs, groups in turn) whichever rows, blocks or threads share the call: a row's bits depend on the
// row and the weights alone, by construction.
//
// Without AVX512-BF16 (an AVX2 build, or AVX-512 without BF16) the same sums run in fp32 FMAs: a pair's levels
// widened to floats once for the rows of a group, and vdpbf16ps's two steps per pair made as two FMAs, odd input
// first, under its rounding (denormals flushed in and out, to nearest; MXCSR for the call). Its bits are the
// AVX512-BF16 path's except where a total falls below 2^-126 (there the AVX-512 path's step and low FMAs keep
// denormals). Needs AVX2 and FMA at least; elsewhere the format is refused (decoding/weights.py).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>
#include "lanes.h"
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define LLMA_Q4 1
#elif defined(__AVX2__) && defined(__FMA__)
#define LLMA_Q4_AVX2 1
#endif

namespace {

constexpr int64_t kGroup = 32;  // inputs sharing one step and one low
constexpr int64_t kTile = 16;   // output channels in one register
constexpr int64_t kRows = 8;    // rows taking each widened weight (8 sums + 8 totals in registers)

bool q4_available() {
#if defined(LLMA_Q4) || defined(LLMA_Q4_AVX2)
  return true;
#else
  return false;
#endif
}

#ifdef LLMA_Q4
// bf16 bits of 0..15 (twice: the lookup reads 5 index bits), looked up by each 16-bit lane's level.
inline __m512i level_table() {
  alignas(64) uint16_t table[32];
  for (int i = 0; i < 32; ++i) table[i] = c10::BFloat16(static_cast<float>(i & 15)).x;
  return _mm512_load_si512(table);
}

// 16 channels' levels of inputs 2p and 2p+1 (a byte a channel: 2p low nibble, 2p+1 high) as vdpbf16ps pairs:
// lane j holds channel j's level of input 2p in its low half and of 2p+1 in its high half, as bf16.
inline __m512bh widen(const uint8_t* bytes, __m512i table) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  const __m512i pair = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0xF)),
                                       _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0xF0)), 12));
  return (__m512bh)_mm512_permutexvar_epi16(pair, table);
}

inline __m512 widen_scales(const uint16_t* bf16) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// R rows x one tile of 16 channels; the same operations per row for every R.
template <int R>
void tile_rows(const uint16_t* x, int64_t k, const float* sums, const uint8_t* levels, const uint16_t* scales,
               int64_t groups, __m512i table, uint16_t* out, int64_t n) {
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512 dot[R];
    for (int r = 0; r < R; ++r) dot[r] = _mm512_setzero_ps();
    const uint8_t* group_levels = levels + g * (kGroup / 2) * kTile;
    for (int64_t p = 0; p < kGroup / 2; ++p) {
      const __m512bh w = widen(group_levels + p * kTile, table);
      for (int r = 0; r < R; ++r) {
        const int32_t pair = *reinterpret_cast<const int32_t*>(x + r * k + g * kGroup + 2 * p);
        dot[r] = _mm512_dpbf16_ps(dot[r], (__m512bh)_mm512_set1_epi32(pair), w);
      }
    }
    const __m512 step = widen_scales(scales + g * 2 * kTile), low = widen_scales(scales + g * 2 * kTile + kTile);
    for (int r = 0; r < R; ++r) {
      total[r] = _mm512_fmadd_ps(dot[r], step, total[r]);
      total[r] = _mm512_fmadd_ps(_mm512_set1_ps(sums[r * groups + g]), low, total[r]);
    }
  }
  for (int r = 0; r < R; ++r)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * n), (__m256i)_mm512_cvtneps_pbh(total[r]));
}

using TileRows = void (*)(const uint16_t*, int64_t, const float*, const uint8_t*, const uint16_t*, int64_t, __m512i,
                          uint16_t*, int64_t);
constexpr TileRows kTileRows[kRows + 1] = {nullptr, tile_rows<1>, tile_rows<2>, tile_rows<3>, tile_rows<4>,
                                           tile_rows<5>, tile_rows<6>, tile_rows<7>, tile_rows<8>};

// Each row's sum of x over each group of inputs, in fp32: 16 pair sums, then one fixed tree.
std::vector<float> group_sums(const uint16_t* x, int64_t rows, int64_t k) {
  const int64_t groups = k / kGroup;
  std::vector<float> sums(rows * groups);
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(c10::BFloat16(1.0f).x);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * k + g * kGroup);
      sums[r * groups + g] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), xv, ones));
    }
  return sums;
}
#endif

#ifdef LLMA_Q4_AVX2
// A row's sums over a group are one chain of 32 FMAs (the order is the AVX-512 path's), 4 cycles each, so a block
// of rows takes several groups at once: kChains chains (R rows x G groups x 2 halves of the tile) keep both FMA
// units busy. Groups are widened kWidened at a time, once for every block of rows.
constexpr int kBlock = 4;     // rows at once at most: 8 registers of sums
constexpr int kChains = 8;    // independent sums in flight: R x G x 2
constexpr int kWidened = 4;   // groups widened at a time (8 KB of floats)

// What vdpbf16ps does whatever MXCSR says (denormals flushed in and out, round to nearest), for this thread
// while the object lives.
class DenormalsFlushed {
 public:
  DenormalsFlushed() : saved_(_mm_getcsr()) { _mm_setcsr((saved_ & ~0x6000u) | 0x8040u); }
  ~DenormalsFlushed() { _mm_setcsr(saved_); }
  DenormalsFlushed(const DenormalsFlushed&) = delete;
  DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

 private:
  unsigned saved_;
};

inline __m256 widen8(const uint16_t* bf16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bf16))), 16));
}

// One group's levels (16 pairs of inputs x 16 channels, a byte a channel) as floats, 4 registers a pair
// (channels 0-7 and 8-15 of input 2p, then of input 2p+1), then its steps and lows (channels 0-7, 8-15 each).
inline void widen_group(const uint8_t* bytes, const uint16_t* scales, __m256* w) {
  const __m256i nibble = _mm256_set1_epi32(0xF);
  for (int p = 0; p < kGroup / 2; ++p) {
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + p * kTile)));
    const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + p * kTile + 8)));
    w[4 * p] = _mm256_cvtepi32_ps(_mm256_and_si256(lo, nibble));
    w[4 * p + 1] = _mm256_cvtepi32_ps(_mm256_and_si256(hi, nibble));
    w[4 * p + 2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4));
    w[4 * p + 3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4));
  }
  for (int i = 0; i < 4; ++i) w[2 * kGroup + i] = widen8(scales + 8 * i);
}
constexpr int kWidenedGroup = 2 * kGroup + 4;  // registers of one widened group

// R rows' totals (16 floats a row, `totals`) after G more groups: each group's dot products as tile_rows makes
// them (a pair: odd input, then even), then its step and low, the groups in turn. x: the rows' inputs from the
// first of the groups, a row every k floats; w: the groups widened (widen_group).
template <int R, int G>
void groups_rows(const float* x, int64_t k, const __m256* w, const float* sums, int64_t groups, float* totals) {
  __m256 dot[G][R][2];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) dot[g][r][0] = dot[g][r][1] = _mm256_setzero_ps();
  for (int p = 0; p < kGroup / 2; ++p)
    for (int g = 0; g < G; ++g) {
      const __m256* wp = w + g * kWidenedGroup + 4 * p;
      for (int r = 0; r < R; ++r) {
        const float* xp = x + r * k + g * kGroup + 2 * p;
        const __m256 odd = _mm256_broadcast_ss(xp + 1), even = _mm256_broadcast_ss(xp);
        for (int h = 0; h < 2; ++h)
          dot[g][r][h] = _mm256_fmadd_ps(even, wp[h], _mm256_fmadd_ps(odd, wp[2 + h], dot[g][r][h]));
      }
    }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) {
      __m256 total = _mm256_loadu_ps(totals + r * kTile + 8 * h);
      for (int g = 0; g < G; ++g) {
        const __m256* scale = w + g * kWidenedGroup + 2 * kGroup;
        total = _mm256_fmadd_ps(dot[g][r][h], scale[h], total);
        total = _mm256_fmadd_ps(_mm256_set1_ps(sums[r * groups + g]), scale[2 + h], total);
      }
      _mm256_storeu_ps(totals + r * kTile + 8 * h, total);
    }
}

// groups_rows<1, G> for one row alone, the levels widened in registers as they are used: no row shares them, so
// storing and reloading them (half the work of a lone row's product) is saved. The same operations on every lane.
template <int G>
void groups_one_row(const float* x, const uint8_t* levels, const uint16_t* scales, const float* sums,
                    float* totals) {
  const __m256i nibble = _mm256_set1_epi32(0xF);
  __m256 dot[G][2];
  for (int g = 0; g < G; ++g) dot[g][0] = dot[g][1] = _mm256_setzero_ps();
  for (int p = 0; p < kGroup / 2; ++p)
    for (int g = 0; g < G; ++g) {
      const uint8_t* bytes = levels + (g * (kGroup / 2) + p) * kTile;
      const float* xp = x + g * kGroup + 2 * p;
      const __m256 odd = _mm256_broadcast_ss(xp + 1), even = _mm256_broadcast_ss(xp);
      for (int h = 0; h < 2; ++h) {
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8 * h)));
        const __m256 w_odd = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
        const __m256 w_even = _mm256_cvtepi32_ps(_mm256_and_si256(b, nibble));
        dot[g][h] = _mm256_fmadd_ps(even, w_even, _mm256_fmadd_ps(odd, w_odd, dot[g][h]));
      }
    }
  for (int h = 0; h < 2; ++h) {
    __m256 total = _mm256_loadu_ps(totals + 8 * h);
    for (int g = 0; g < G; ++g) {
      total = _mm256_fmadd_ps(dot[g][h], widen8(scales + g * 2 * kTile + 8 * h), total);
      total = _mm256_fmadd_ps(_mm256_set1_ps(sums[g]), widen8(scales + g * 2 * kTile + kTile + 8 * h), total);
    }
    _mm256_storeu_ps(totals + 8 * h, total);
  }
}

using GroupsRows = void (*)(const float*, int64_t, const __m256*, const float*, int64_t, float*);
// [R][G]: G of 1, 2 or 4 groups
constexpr GroupsRows kGroupsRows[kBlock + 1][kWidened + 1] = {
    {},
    {nullptr, groups_rows<1, 1>, groups_rows<1, 2>, nullptr, groups_rows<1, 4>},
    {nullptr, groups_rows<2, 1>, groups_rows<2, 2>, nullptr, groups_rows<2, 4>},
    {nullptr, groups_rows<3, 1>, groups_rows<3, 2>, nullptr, groups_rows<3, 4>},
    {nullptr, groups_rows<4, 1>, groups_rows<4, 2>, nullptr, groups_rows<4, 4>}};

// 8 floats to bf16 as vcvtneps2bf16 rounds them (to nearest even; a NaN stays a quiet NaN of its sign); no
// denormals reach it under DenormalsFlushed.
inline __m128i to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i half = _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(half, half), 0x08));
}

// Every row's product with one tile of 16 channels; x: the rows as floats, totals: room for rows x 16 floats.
void tile_avx2(const float* x, int64_t rows, int64_t k, const float* sums, const uint8_t* levels,
               const uint16_t* scales, int64_t groups, uint16_t* out, int64_t n, float* totals) {
  alignas(32) __m256 w[kWidened * kWidenedGroup];
  std::fill(totals, totals + rows * kTile, 0.0f);
  if (rows == 1) {
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4)
      groups_one_row<4>(x + g * kGroup, levels + g * (kGroup / 2) * kTile, scales + g * 2 * kTile, sums + g, totals);
    for (; g < groups; ++g)
      groups_one_row<1>(x + g * kGroup, levels + g * (kGroup / 2) * kTile, scales + g * 2 * kTile, sums + g, totals);
    groups = 0;  // done: only the bf16 results below
  }
  for (int64_t g0 = 0; g0 < groups; g0 += kWidened) {
    const int64_t widened = std::min<int64_t>(kWidened, groups - g0);
    for (int64_t g = 0; g < widened; ++g)
      widen_group(levels + (g0 + g) * (kGroup / 2) * kTile, scales + (g0 + g) * 2 * kTile, w + g * kWidenedGroup);
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
      const int64_t block = std::min<int64_t>(kBlock, rows - r0);
      for (int64_t g = 0; g < widened;) {
        int64_t take = std::min<int64_t>(widened - g, std::max<int64_t>(1, kChains / (2 * block)));
        take = take >= 4 ? 4 : take >= 2 ? 2 : 1;
        kGroupsRows[block][take](x + r0 * k + (g0 + g) * kGroup, k, w + g * kWidenedGroup,
                                 sums + r0 * groups + g0 + g, groups, totals + r0 * kTile);
        g += take;
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < 2; ++h)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r * n + 8 * h), to_bf16(_mm256_loadu_ps(totals + r * kTile + 8 * h)));
}

// The rows as floats, and each row's sum of x over each group as group_sums makes it (pairs: 0 + odd + even,
// then the 16 pair sums reduced as _mm512_reduce_add_ps does).
void widen_rows(const uint16_t* x, int64_t rows, int64_t k, std::vector<float>& xf, std::vector<float>& sums) {
  const int64_t groups = k / kGroup;
  xf.resize(rows * k);
  sums.resize(rows * groups);
  for (int64_t i = 0; i < rows * k; ++i) xf[i] = llma_lanes::to_f(c10::BFloat16(x[i], c10::BFloat16::from_bits()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = xf.data() + r * k + g * kGroup;
      alignas(32) float pairs[kTile];
      for (int j = 0; j < kTile; ++j) pairs[j] = (0.0f + xg[2 * j + 1]) + xg[2 * j];  // 0 + (-0) is +0 there too
      sums[r * groups + g] = llma_lanes::reduce_add_halves(_mm256_load_ps(pairs + 8), _mm256_load_ps(pairs));
    }
}
#endif

// x (M, K) bf16; levels (N/16, K/2 * 16) uint8: per tile of 16 channels, per pair of inputs, a byte a channel;
// scales (N/16, K/32, 2, 16) bf16: per tile and group, 16 steps then 16 lows. w[n][i] = level * step + low.
at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& levels, const at::Tensor& scales) {
  TORCH_CHECK(q4_available(), "q4_linear: built without AVX512-BF16 or AVX2");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2, "q4_linear: x (M, K) in bf16");
  TORCH_CHECK(levels.scalar_type() == at::kByte && levels.is_contiguous() && levels.dim() == 2,
              "q4_linear: levels (N/16, K*8) uint8");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous(), "q4_linear: bf16 scales");
  const at::Tensor xc = x.contiguous();
  const int64_t rows = xc.size(0), k = xc.size(1), tiles = levels.size(0), n = tiles * kTile, groups = k / kGroup;
  TORCH_CHECK(k % kGroup == 0 && levels.size(1) == k / 2 * kTile && scales.numel() == n * groups * 2,
              "q4_linear: x, levels and scales do not fit together");
  at::Tensor out = at::empty({rows, n}, x.options());
#if defined(LLMA_Q4_AVX2)
  const auto* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
  std::vector<float> xf, sums;
  {
    DenormalsFlushed flushed;
    widen_rows(xb, rows, k, xf, sums);
  }
  const uint8_t* lv = levels.data_ptr<uint8_t>();
  const auto* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    DenormalsFlushed flushed;
    std::vector<float> totals(rows * kTile);
    for (int64_t t = begin; t < end; ++t)
      tile_avx2(xf.data(), rows, k, sums.data(), lv + t * (k / 2) * kTile, sc + t * groups * 2 * kTile, groups,
                o + t * kTile, n, totals.data());
  });
#elif defined(LLMA_Q4)
  const auto* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
  const std::vector<float> sums = group_sums(xb, rows, k);
  const uint8_t* lv = levels.data_ptr<uint8_t>();
  const auto* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const __m512i table = level_table();
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t r0 = 0; r0 < rows; r0 += kRows)
        kTileRows[std::min(kRows, rows - r0)](xb + r0 * k, k, sums.data() + r0 * groups, lv + t * (k / 2) * kTile,
                                              sc + t * groups * 2 * kTile, groups, table, o + r0 * n + t * kTile, n);
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
