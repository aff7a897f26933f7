// x @ w.T for bf16 weights in fp32 FMAs, one fixed chain per output, whatever the rows: the LM head where PyTorch's
// bf16 products are emulated (an AVX2 CPU without AVX512-BF16; decoding/packing.py, bf16_emulated).
//
// Each output is one chain of fused multiply-adds over the inputs in order, acc = x_i * w_i + acc from i = 0, then
// rounded to bf16 once. Nothing is summed across lanes, so a row's bits depend on the row and the weights alone,
// whatever rows, blocks or threads share the call (what LLMA's losslessness rests on), and the AVX-512 and AVX2 builds
// give the same bits: each lane is the same FMA in both.
//
// Why: there, PyTorch widens bf16 to fp32 inside a generic loop; the bundled model's head (49,152 x 576) took 3.2 ms
// for one row and 17.7 ms for 8 (AVX2, 2 threads; docs/kernels/avx2.md), the larger part of an 8-row forward. Here a
// widened weight serves a block of rows from registers, so 8 rows cost little more than the weights' bytes.
//
// Layout (decoding/weights.py lane_head_weight): per tile of `head_tile()` output channels (16 on AVX-512, one
// register; 8 on AVX2, so that 8 rows' sums and a weight fit its 16 registers), input after input, the tile's weights
// of that input; (N / tile, K * tile) bf16.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include "lanes.h"

namespace {

#if defined(LLMA_AVX512)
using Lanes = __m512;  // a tile's outputs: one register
constexpr int64_t kTile = 16;
inline Lanes widen(const c10::BFloat16* p) { return llma_lanes::load16(p); }
inline Lanes zero() { return _mm512_setzero_ps(); }
inline Lanes fmadd(float x, Lanes w, Lanes acc) { return _mm512_fmadd_ps(_mm512_set1_ps(x), w, acc); }
inline void store(float* p, Lanes v) { _mm512_storeu_ps(p, v); }
#elif defined(LLMA_AVX2)
using Lanes = __m256;  // 8 outputs a tile, so 8 rows' sums fit the 16 registers
constexpr int64_t kTile = 8;
inline Lanes widen(const c10::BFloat16* p) {
  return llma_lanes::widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline Lanes zero() { return _mm256_setzero_ps(); }
inline Lanes fmadd(float x, Lanes w, Lanes acc) { return _mm256_fmadd_ps(_mm256_set1_ps(x), w, acc); }
inline void store(float* p, Lanes v) { _mm256_storeu_ps(p, v); }
#else
constexpr int64_t kTile = 16;
#endif

bool head_available() {
#if defined(LLMA_VEC16)
  return true;
#else
  return false;
#endif
}

// Output channels of a tile in this build's layout (decoding/weights.py lane_head_weight).
int64_t head_tile() { return kTile; }

#if defined(LLMA_VEC16)
constexpr int kBlock = 8;   // rows sharing each widened weight
constexpr int kSpan = 8;    // tiles a thread takes at a time
constexpr int kChains = 8;  // sums in flight: an FMA's latency times the two FMAs a cycle

// Tiles side by side for R rows, so R x T sums are in flight: one row alone would otherwise wait on one chain.
constexpr int tiles_for(int rows) { return std::max(1, kChains / rows); }

// R rows x T adjacent tiles: for each input, each tile's weights widened once, one FMA per row. The tiles `next`
// (a span ahead) are fetched meanwhile: tiles follow one another in memory, and a block of rows works through them
// faster than memory delivers them unless they are asked for early.
template <int R, int T>
void tile_rows(const float* x, int64_t k, const c10::BFloat16* w, const c10::BFloat16* next, c10::BFloat16* out,
               int64_t n) {
  Lanes total[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) total[r][t] = zero();
  constexpr int64_t kLineInputs = 64 / (kTile * 2);  // inputs a cache line of a tile holds
  for (int64_t i = 0; i < k; ++i) {
    if (i % kLineInputs == 0)
      for (int t = 0; t < T; ++t)
        _mm_prefetch(reinterpret_cast<const char*>(next + t * k * kTile + i * kTile), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const Lanes weight = widen(w + t * k * kTile + i * kTile);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) total[r][t] = fmadd(x[r * k + i], weight, total[r][t]);
    }
  }
  alignas(64) float lanes[kTile];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      store(lanes, total[r][t]);
      for (int64_t c = 0; c < kTile; ++c) out[r * n + t * kTile + c] = c10::BFloat16(lanes[c]);  // nearest even
    }
}

using TileRows = void (*)(const float*, int64_t, const c10::BFloat16*, const c10::BFloat16*, c10::BFloat16*, int64_t);
struct Kernels {
  TileRows wide, one;  // tiles_for(R) tiles at a time, and one tile
};
template <int... R>
constexpr std::array<Kernels, sizeof...(R) + 1> kernel_table(std::integer_sequence<int, R...>) {
  return {Kernels{nullptr, nullptr}, Kernels{tile_rows<R + 1, tiles_for(R + 1)>, tile_rows<R + 1, 1>}...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kBlock>{});
#endif

// x (M, K) bf16; w (N / tile, K * tile) bf16 as laid out above. Returns (M, N) bf16.
at::Tensor head_linear(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(head_available(), "head_linear: built without AVX-512 or AVX2 and FMA");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2, "head_linear: x (M, K) in bf16");
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous() && w.dim() == 2,
              "head_linear: w (N / tile, K * tile) bf16");
  const int64_t rows = x.size(0), k = x.size(1), tiles = w.size(0), n = tiles * kTile;
  TORCH_CHECK(w.size(1) == k * kTile, "head_linear: x and w do not fit together");
  at::Tensor out = at::empty({rows, n}, x.options());
#if defined(LLMA_VEC16)
  const at::Tensor widened = x.to(at::kFloat).contiguous();  // each input widened once (exact), not once per tile
  const float* xf = widened.data_ptr<float>();
  const c10::BFloat16* wp = w.data_ptr<c10::BFloat16>();
  c10::BFloat16* o = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, tiles, kSpan, [&](int64_t begin, int64_t end) {
    for (int64_t t0 = begin; t0 < end; t0 += kSpan) {
      const int64_t span = std::min<int64_t>(kSpan, end - t0);
      for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        const int block = int(std::min<int64_t>(kBlock, rows - r0));
        const int64_t wide = tiles_for(block);
        for (int64_t t = t0; t < t0 + span;) {
          const bool whole = t + wide <= t0 + span;
          const int64_t ahead = std::min(t + kSpan, tiles - (whole ? wide : 1));  // the next span's, inside w
          (whole ? kKernels[block].wide : kKernels[block].one)(xf + r0 * k, k, wp + t * k * kTile,
                                                               wp + ahead * k * kTile, o + r0 * n + t * kTile, n);
          t += whole ? wide : 1;
        }
      }
    }
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llma, m) {
  m.def("head_linear(Tensor x, Tensor w) -> Tensor");
  m.impl("head_linear", c10::DispatchKey::CPU, TORCH_FN(head_linear));
  m.def("head_available() -> bool", TORCH_FN(head_available));
  m.def("head_tile() -> int", TORCH_FN(head_tile));
}
