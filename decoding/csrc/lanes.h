// bf16 and fp32 values read as floats, one at a time or 16 at a time: shared by the lane library's kernels
// (lane_attention.cpp, first_argmax.cpp, q4_product.cpp). A bf16 value's bits are a float's upper half, so both
// reads are exact.
//
// Which vector paths a build has is fixed when it is compiled (decoding/lane_kernel.py: -march=native, or
// -mavx2 -mfma -mf16c when CHATBOT_KERNEL_ISA=avx2):
//   LLMA_AVX512  16 floats in one AVX-512 register (__m512);
//   LLMA_AVX2    16 floats in two AVX2 registers (Vec16: lanes 0-7 and 8-15), each lane computed by the same
//                operation as its AVX-512 lane, and sums of the 16 lanes reduced in the order GCC's
//                _mm512_reduce_add_ps reduces them, so a row's score, softmax and sums are the AVX-512 bits;
//   neither      plain loops.
// Either way a row's operations never depend on the other rows of a call: what keeps replies lossless.
#pragma once
#include <c10/util/BFloat16.h>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#define LLMA_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLMA_AVX2 1
#endif
#if defined(LLMA_AVX512) || defined(LLMA_AVX2)
#define LLMA_VEC16 1
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace llma_lanes {

inline float to_f(float x) { return x; }
inline float to_f(c10::BFloat16 x) { uint32_t b = uint32_t(x.x) << 16; float f; std::memcpy(&f, &b, 4); return f; }

// The vector paths this build runs, for the engine line and the benchmark (decoding/lane_kernel.py).
inline const char* vector_paths() {
#if defined(LLMA_AVX512) && defined(__AVX512BF16__)
  return "avx512-bf16";
#elif defined(LLMA_AVX512)
  return "avx512";
#elif defined(LLMA_AVX2)
  return "avx2";
#else
  return "scalar";
#endif
}

#if defined(LLMA_AVX512)
using Vec16 = __m512;
inline Vec16 load16(const float* p) { return _mm512_loadu_ps(p); }
inline Vec16 load16(const c10::BFloat16* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline void store16(float* p, Vec16 v) { _mm512_storeu_ps(p, v); }
inline Vec16 zero16() { return _mm512_setzero_ps(); }
inline Vec16 set16(float x) { return _mm512_set1_ps(x); }
inline Vec16 add16(Vec16 a, Vec16 b) { return _mm512_add_ps(a, b); }
inline Vec16 sub16(Vec16 a, Vec16 b) { return _mm512_sub_ps(a, b); }
inline Vec16 mul16(Vec16 a, Vec16 b) { return _mm512_mul_ps(a, b); }
inline Vec16 max16(Vec16 a, Vec16 b) { return _mm512_max_ps(a, b); }
inline Vec16 fmadd16(Vec16 a, Vec16 b, Vec16 c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c, rounded once
inline Vec16 fnmadd16(Vec16 a, Vec16 b, Vec16 c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b, rounded once
inline float reduce_add16(Vec16 v) { return _mm512_reduce_add_ps(v); }
inline float reduce_max16(Vec16 v) { return _mm512_reduce_max_ps(v); }
// lanes count.. set to 0 (0 <= count <= 16)
inline Vec16 keep_first16(Vec16 v, int64_t count) { return _mm512_maskz_mov_ps(__mmask16((1u << count) - 1), v); }
#endif

#if defined(__AVX2__)
// The sum of 16 lanes held as two halves, in the order GCC's _mm512_reduce_add_ps (avx512fintrin.h) adds them:
// upper 8 + lower 8, then upper 4 + lower 4, then lanes (0 + 2, 1 + 3), then those two.
inline float reduce_add_halves(__m256 hi, __m256 lo) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}
#endif

#if defined(LLMA_AVX2)
struct Vec16 {
  __m256 lo, hi;  // lanes 0-7, lanes 8-15
};
inline __m256 widen8(__m128i bf16) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16)); }
inline Vec16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline Vec16 load16(const c10::BFloat16* p) {
  return {widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline void store16(float* p, Vec16 v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
inline Vec16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline Vec16 set16(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline Vec16 add16(Vec16 a, Vec16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline Vec16 sub16(Vec16 a, Vec16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline Vec16 mul16(Vec16 a, Vec16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline Vec16 max16(Vec16 a, Vec16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline Vec16 fmadd16(Vec16 a, Vec16 b, Vec16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline Vec16 fnmadd16(Vec16 a, Vec16 b, Vec16 c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
inline float reduce_add16(Vec16 v) { return reduce_add_halves(v.hi, v.lo); }
// GCC's _mm512_reduce_max_ps, as reduce_add_halves with max for +
inline float reduce_max16(Vec16 v) {
  const __m256 t3 = _mm256_max_ps(v.hi, v.lo);
  const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1))));
}
inline Vec16 keep_first16(Vec16 v, int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(count)), index);
  const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(count) - 8), index);
  return {_mm256_and_ps(v.lo, _mm256_castsi256_ps(lo)), _mm256_and_ps(v.hi, _mm256_castsi256_ps(hi))};
}
#endif

}  // namespace llma_lanes
