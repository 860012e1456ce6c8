// Shared header for generated C++ kernels: `#include "cpp_prelude.h"`.
//
// Everything here must give the same bits as ATen on the CPU. The build layer compiles
// with -ffp-contract=off and without -ffast-math; the half conversion below relies on
// both (it uses float arithmetic that an FMA or reassociation would change).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace crucible {

inline float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t float_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// bfloat16 is the top half of a float32; rounding matches c10::BFloat16 (nearest even,
// NaN becomes the canonical quiet NaN 0x7fc0).
inline float bf16_to_float(uint16_t bits) { return float_from_bits(uint32_t(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  if (std::isnan(value)) return UINT16_C(0x7fc0);
  uint32_t bits = float_to_bits(value);
  uint32_t rounding_bias = ((bits >> 16) & 1) + UINT32_C(0x7fff);
  return uint16_t((bits + rounding_bias) >> 16);
}

// IEEE half <-> float, the branch-free algorithms c10::Half uses (from the FP16 library),
// so results agree with tensor.half() / tensor.float() bit for bit, subnormals included.
inline float half_to_float(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = UINT32_C(0xE0) << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = float_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = UINT32_C(126) << 23;
  const float magic_bias = 0.5f;
  const float denormalized = float_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? float_to_bits(denormalized) : float_to_bits(normalized));
  return float_from_bits(result);
}

inline uint16_t float_to_half(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
  base = float_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = float_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

// torch.maximum / torch.minimum / amax semantics: a NaN in either operand wins.
// (std::max and fmax drop NaNs, which ATen does not.)
template <typename T>
inline T max_propagate_nan(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

template <typename T>
inline T min_propagate_nan(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a < b ? a : b;
}

}  // namespace crucible
