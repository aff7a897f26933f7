// The first index of each row's largest value, as torch's argmax picks it (a NaN counts as larger than any number,
// the first NaN wins; ties go to the first index), for bf16 and fp32 rows: greedy's choice after every forward.
//
// torch's CPU argmax walks a row one element at a time: 49,152 logits cost ~36 us a row (AMD EPYC), and a reply's
// thread picks up to 8 rows between two forwards. Here the largest value is found first, 16 lanes at a time
// (AVX-512 or AVX2 where the build has them, else one by one), then the row is read again up to the first element
// equal to it (or the first NaN). Only comparisons: the index is torch's exactly, whatever the values and paths.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <cstdint>
#include <limits>
#include <vector>

#include "lanes.h"

namespace {

constexpr int64_t kLanes = 16;
using llma_lanes::to_f;
#if defined(LLMA_VEC16)
using llma_lanes::load16;
#endif

#if defined(LLMA_AVX2)
// Bit j set where lane j of v is NaN (nan) or equals target (!nan): the AVX-512 path's compare masks.
inline uint32_t hits16(llma_lanes::Vec16 v, bool nan, float target) {
  const __m256 t = _mm256_set1_ps(target);
  const __m256 lo = nan ? _mm256_cmp_ps(v.lo, v.lo, _CMP_UNORD_Q) : _mm256_cmp_ps(v.lo, t, _CMP_EQ_OQ);
  const __m256 hi = nan ? _mm256_cmp_ps(v.hi, v.hi, _CMP_UNORD_Q) : _mm256_cmp_ps(v.hi, t, _CMP_EQ_OQ);
  return uint32_t(_mm256_movemask_ps(lo)) | uint32_t(_mm256_movemask_ps(hi)) << 8;
}
#endif

template <typename T>
int64_t row_first_argmax(const T* row, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  bool nan = false;
  int64_t whole = 0;
#if defined(LLMA_AVX512)
  whole = n - n % kLanes;
  __m512 lanes = _mm512_set1_ps(best);
  __mmask16 nans = 0;
  for (int64_t i = 0; i < whole; i += kLanes) {
    __m512 v = load16(row + i);
    nans |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    lanes = _mm512_max_ps(lanes, v);  // a NaN is counted in `nans`; -0 and +0 compare equal below
  }
  best = _mm512_reduce_max_ps(lanes);
  nan = nans != 0;
#elif defined(LLMA_AVX2)
  whole = n - n % kLanes;
  llma_lanes::Vec16 lanes = llma_lanes::set16(best);
  uint32_t nans = 0;
  for (int64_t i = 0; i < whole; i += kLanes) {
    const llma_lanes::Vec16 v = load16(row + i);
    nans |= hits16(v, true, 0.0f);
    lanes = llma_lanes::max16(lanes, v);
  }
  best = llma_lanes::reduce_max16(lanes);
  nan = nans != 0;
#endif
  for (int64_t i = whole; i < n; ++i) {
    float v = to_f(row[i]);
    nan |= v != v;
    best = v > best ? v : best;
  }
#if defined(LLMA_AVX512)
  __m512 target = _mm512_set1_ps(best);
  for (int64_t i = 0; i < whole; i += kLanes) {
    __m512 v = load16(row + i);
    __mmask16 hit = nan ? _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) : _mm512_cmp_ps_mask(v, target, _CMP_EQ_OQ);
    if (hit) return i + __builtin_ctz(hit);
  }
#elif defined(LLMA_AVX2)
  for (int64_t i = 0; i < whole; i += kLanes) {
    const uint32_t hit = hits16(load16(row + i), nan, best);
    if (hit) return i + __builtin_ctz(hit);
  }
#endif
  for (int64_t i = whole; i < n; ++i) {
    float v = to_f(row[i]);
    if (nan ? v != v : v == best) return i;
  }
  return 0;  // not reached for n > 0: some element equals the largest (or is the first NaN)
}

std::vector<int64_t> first_argmax(const at::Tensor& rows) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) > 0, "first_argmax takes rows (n, V) with V > 0");
  TORCH_CHECK(rows.scalar_type() == at::kBFloat16 || rows.scalar_type() == at::kFloat,
              "first_argmax takes bfloat16 or float32 rows");
  at::Tensor x = rows.contiguous();
  int64_t n = x.size(0), v = x.size(1);
  std::vector<int64_t> chosen(n);
  for (int64_t r = 0; r < n; ++r) {
    chosen[r] = x.scalar_type() == at::kBFloat16
        ? row_first_argmax(x.data_ptr<c10::BFloat16>() + r * v, v)
        : row_first_argmax(x.data_ptr<float>() + r * v, v);
  }
  return chosen;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llma, m) {
  m.def("first_argmax(Tensor rows) -> int[]");
  m.impl("first_argmax", c10::DispatchKey::CPU, TORCH_FN(first_argmax));
}
