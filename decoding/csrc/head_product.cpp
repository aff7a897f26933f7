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
// Layout (decoding/weights.py lane_head_weight): per tile of 16 output channels, input after input, the tile's 16
// weights of that input; (N / 16, K * 16) bf16.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include "lanes.h"

namespace {

constexpr int64_t kTile = 16;  // output channels of a tile: one Vec16

bool head_available() {
#if defined(LLMA_VEC16)
  return true;
#else
  return false;
#endif
}

#if defined(LLMA_VEC16)
using llma_lanes::Vec16;

#if defined(LLMA_AVX512)
constexpr int64_t kBlock = 8;  // rows sharing each widened weight: 8 sums in registers
#else
constexpr int64_t kBlock = 4;  // 4 rows x 2 halves of sums in 8 registers
#endif

// R rows x one tile: for each input, the tile's 16 weights widened once, one FMA per row.
template <int R>
void tile_rows(const float* x, int64_t k, const c10::BFloat16* w, c10::BFloat16* out, int64_t n) {
  Vec16 total[R];
  for (int r = 0; r < R; ++r) total[r] = llma_lanes::zero16();
  for (int64_t i = 0; i < k; ++i) {
    const Vec16 weight = llma_lanes::load16(w + i * kTile);
    for (int r = 0; r < R; ++r) total[r] = llma_lanes::fmadd16(llma_lanes::set16(x[r * k + i]), weight, total[r]);
  }
  alignas(64) float lanes[kTile];
  for (int r = 0; r < R; ++r) {
    llma_lanes::store16(lanes, total[r]);
    for (int64_t c = 0; c < kTile; ++c) out[r * n + c] = c10::BFloat16(lanes[c]);  // c10's round to nearest even
  }
}

using TileRows = void (*)(const float*, int64_t, const c10::BFloat16*, c10::BFloat16*, int64_t);
template <int... R>
constexpr std::array<TileRows, sizeof...(R) + 1> tile_table(std::integer_sequence<int, R...>) {
  return {nullptr, tile_rows<R + 1>...};
}
constexpr auto kTileRows = tile_table(std::make_integer_sequence<int, kBlock>{});
#endif

// x (M, K) bf16; w (N/16, K*16) bf16 as laid out above. Returns (M, N) bf16.
at::Tensor head_linear(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(head_available(), "head_linear: built without AVX-512 or AVX2 and FMA");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2, "head_linear: x (M, K) in bf16");
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous() && w.dim() == 2, "head_linear: w (N/16, K*16) bf16");
  const int64_t rows = x.size(0), k = x.size(1), tiles = w.size(0), n = tiles * kTile;
  TORCH_CHECK(w.size(1) == k * kTile, "head_linear: x and w do not fit together");
  at::Tensor out = at::empty({rows, n}, x.options());
#if defined(LLMA_VEC16)
  const at::Tensor widened = x.to(at::kFloat).contiguous();  // each input widened once (exact), not once per tile
  const float* xf = widened.data_ptr<float>();
  const c10::BFloat16* wp = w.data_ptr<c10::BFloat16>();
  c10::BFloat16* o = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
        kTileRows[std::min(kBlock, rows - r0)](xf + r0 * k, k, wp + t * k * kTile, o + r0 * n + t * kTile, n);
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llma, m) {
  m.def("head_linear(Tensor x, Tensor w) -> Tensor");
  m.impl("head_linear", c10::DispatchKey::CPU, TORCH_FN(head_linear));
  m.def("head_available() -> bool", TORCH_FN(head_available));
}
