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
// row and the weights alone, by construction. Needs AVX512-BF16; elsewhere the format is refused
// (decoding/weights.py).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <cstdint>
#include <vector>
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define LLMA_Q4 1
#endif

namespace {

constexpr int64_t kGroup = 32;  // inputs sharing one step and one low
constexpr int64_t kTile = 16;   // output channels in one register
constexpr int64_t kRows = 8;    // rows taking each widened weight (8 sums + 8 totals in registers)

bool q4_available() {
#ifdef LLMA_Q4
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

// x (M, K) bf16; levels (N/16, K/2 * 16) uint8: per tile of 16 channels, per pair of inputs, a byte a channel;
// scales (N/16, K/32, 2, 16) bf16: per tile and group, 16 steps then 16 lows. w[n][i] = level * step + low.
at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& levels, const at::Tensor& scales) {
  TORCH_CHECK(q4_available(), "q4_linear: built without AVX512-BF16");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2, "q4_linear: x (M, K) in bf16");
  TORCH_CHECK(levels.scalar_type() == at::kByte && levels.is_contiguous() && levels.dim() == 2,
              "q4_linear: levels (N/16, K*8) uint8");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous(), "q4_linear: bf16 scales");
  const at::Tensor xc = x.contiguous();
  const int64_t rows = xc.size(0), k = xc.size(1), tiles = levels.size(0), n = tiles * kTile, groups = k / kGroup;
  TORCH_CHECK(k % kGroup == 0 && levels.size(1) == k / 2 * kTile && scales.numel() == n * groups * 2,
              "q4_linear: x, levels and scales do not fit together");
  at::Tensor out = at::empty({rows, n}, x.options());
#ifdef LLMA_Q4
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
