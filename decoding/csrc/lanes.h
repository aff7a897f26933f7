// bf16 and fp32 values read as floats, one at a time or 16 to an AVX-512 register: shared by the lane library's
// kernels (lane_attention.cpp, first_argmax.cpp). A bf16 value's bits are a float's upper half, so both are exact.
#pragma once
#include <c10/util/BFloat16.h>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llma_lanes {

inline float to_f(float x) { return x; }
inline float to_f(c10::BFloat16 x) { uint32_t b = uint32_t(x.x) << 16; float f; std::memcpy(&f, &b, 4); return f; }

#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
#endif

}  // namespace llma_lanes
