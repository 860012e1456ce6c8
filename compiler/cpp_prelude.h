// Shared header for generated C++ kernels: `#include "cpp_prelude.h"`.
//
// Everything here must give the same bits as ATen on the CPU. The build layer compiles
// with -ffp-contract=off and without -ffast-math; the half conversion below relies on
// both (it uses float arithmetic that an FMA or reassociation would change).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

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

// Tensor.view(dtype) of one width: the same bits read as To (Op.BITCAST)
template <typename To, typename From>
inline To bit_cast(From value) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the width");
  To out;
  std::memcpy(&out, &value, sizeof(out));
  return out;
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

// Float to int32/int64 as x86's truncating conversions give it, and so ATen on x86: NaN and values
// out of range become the lowest value. A plain static_cast is undefined there, and GCC folded a NaN
// it could see (float_to_bf16's canonical NaN) to 0 (fuzzer, crucible-cpp, seed 27: int32 of a bf16 log).
template <typename I, typename F>
inline I float_to_int(F value) {
  constexpr F lowest = static_cast<F>(std::numeric_limits<I>::min());  // -2^31 or -2^63, exact
  return (value >= lowest && value < -lowest) ? static_cast<I>(value) : std::numeric_limits<I>::min();
}

// (F)(I)value, float_to_int and back, for a value of type F. Written out because GCC 12 with
// -fno-trapping-math folds that round trip into trunc(value), which is -0.0 for a value in (-1, 0)
// where the conversions give +0.0 (fuzzer, crucible-cpp --dynamic, seed 464: signbit(log1p(int(x))));
// trunc(value) + 0 is the round trip's value, and GCC keeps the addition since trunc can be -0.0.
template <typename I, typename F>
inline F int_round_trip(F value) {
  constexpr F lowest = static_cast<F>(std::numeric_limits<I>::min());
  return (value >= lowest && value < -lowest) ? std::trunc(value) + F(0) : lowest;
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

// --- helpers the C++ renderer (compiler/codegen/cpp.py) emits -----------------------------
// All are branch-free selects where the renderer needs them inside vectorized loops.

// NaN-propagating max/min as selects (vectorizable; same results as the functions above).
// Two plain selects: GCC 12 (with -fno-trapping-math) if-converts these inside loop nests, while
// one select on (a > b) | (a != a) or (a > b || a != a) kept a branch there, unvectorized.
template <typename T>
inline T max_nan(T a, T b) {
  const T m = a > b ? a : b;
  return a != a ? a : m;
}

template <typename T>
inline T min_nan(T a, T b) {
  const T m = a < b ? a : b;
  return a != a ? a : m;
}

// Integer division and remainder: C semantics (truncation, sign of the dividend), with the two
// cases C leaves undefined (and x86 traps on) defined: INT_MIN / -1 wraps, and division by zero
// gives 0 and sets this flag (any thread); the launcher reads and clears it after the call and
// raises ZeroDivisionError, as ATen does on the CPU.
inline int zero_division = 0;

inline void flag_zero_division() { __atomic_store_n(&zero_division, 1, __ATOMIC_RELAXED); }

template <typename T>
inline T div_trunc(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0) - a;
  }
  if (b == T(0)) {
    flag_zero_division();
    return T(0);
  }
  return T(a / b);
}

template <typename T>
inline T mod_trunc(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  if (b == T(0)) {
    flag_zero_division();
    return T(0);
  }
  return T(a % b);
}

// Python floor division.
template <typename T>
inline T div_floor(T a, T b) {
  T q = div_trunc(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (b != T(0) && mod_trunc(a, b) != T(0) && ((a < T(0)) != (b < T(0)))) q = T(q - 1);
  }
  return q;
}

// Integer +, -, *, negation of int32/int64 values wrap around like ATen's instead of being
// undefined behaviour on overflow. Kernels are not built with -fwrapv: it would make the
// optimizer treat index arithmetic as possibly wrapping and stop vectorizing strided loads.
template <typename T>
inline T wrap_add(T a, T b) { using U = std::make_unsigned_t<T>; return T(U(a) + U(b)); }

template <typename T>
inline T wrap_sub(T a, T b) { using U = std::make_unsigned_t<T>; return T(U(a) - U(b)); }

template <typename T>
inline T wrap_mul(T a, T b) { using U = std::make_unsigned_t<T>; return T(U(a) * U(b)); }

template <typename T>
inline T wrap_neg(T a) { using U = std::make_unsigned_t<T>; return T(U(0) - U(a)); }

// + and * for lane folds of any accumulator type (wrapping for int32/int64 accumulators).
template <typename T>
inline T fold_plus(T a, T b) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= sizeof(int)) return wrap_add(a, b);
  else return a + b;
}

template <typename T>
inline T fold_times(T a, T b) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= sizeof(int)) return wrap_mul(a, b);
  else return a * b;
}

// Shifts like ATen: a shift by a negative amount or by the bit width or more gives 0
// (left) or the sign fill (right) instead of undefined behaviour.
template <typename T>
inline T shift_left(T a, T b) {
  constexpr int bits = int(sizeof(T) * 8);
  using U = std::make_unsigned_t<T>;
  if (b < T(0) || b >= T(bits)) return T(0);
  return T(U(a) << b);
}

template <typename T>
inline T shift_right(T a, T b) {
  constexpr int bits = int(sizeof(T) * 8);
  if (b < T(0) || b >= T(bits)) return T(a >> (bits - 1));
  return T(a >> b);
}

// a * b + c with one rounding where the target has FMA. Kernels build with -ffp-contract=off
// (eager's a * b + c rounds twice), but inside the math functions below the fused form is both
// faster and more accurate; their error bounds are tested with and without it.
// (float and double: the generated kernels' sums of products accumulate with it too.)
template <typename T>
inline T madd(T a, T b, T c) {
#ifdef __FMA__
  if constexpr (std::is_same_v<T, float>) return __builtin_fmaf(a, b, c);
  else return __builtin_fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp for float32 that g++ vectorizes (std::exp is a libm call it cannot vectorize without
// -ffast-math). Cephes' expf: Cody-Waite reduction by ln2, a degree-6 polynomial, and a scale
// by 2^k applied in two steps so subnormal results are right. Within 1 ulp of the correctly
// rounded exp on a dense grid (tested), like ATen's vectorized exp (Sleef, 1 ulp); NaN, +-inf,
// overflow and underflow as std::exp.
inline float exp_f32(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float k = std::floor(madd(xc, 1.44269504088896341f, 0.5f));
  float r = madd(k, -0.693359375f, xc);
  r = madd(k, 2.12194440e-4f, r);
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = madd(p, r, 1.3981999507e-3f);
  p = madd(p, r, 8.3334519073e-3f);
  p = madd(p, r, 4.1665795894e-2f);
  p = madd(p, r, 1.6666665459e-1f);
  p = madd(p, r, 5.0000001201e-1f);
  p = madd(p, z, r);
  p = p + 1.0f;
  const int32_t ki = int32_t(k);
  const int32_t k1 = ki >> 1;
  const int32_t k2 = ki - k1;
  const float s1 = float_from_bits(uint32_t(k1 + 127) << 23);
  const float s2 = float_from_bits(uint32_t(k2 + 127) << 23);
  return (p * s1) * s2;  // a NaN passes the clamp and the polynomial: no extra select
}

// Horner's rule, c[0] x^(N-1) + ... + c[N-1], unrolled by template recursion rather than a loop: a
// loop here stayed a loop until after g++ 12's vectorizer ran, and a kernel calling erf_f32 or
// log_f32 (two such loops) was then refused ("loop nest containing two or more consecutive inner
// loops") and ran scalar: GELU and log kernels 5-7x slower than vectorized (tested: every prelude
// math function must vectorize inside a loop).
template <int N, int I = 1>
inline float horner_from(float acc, float x, const float (&c)[N]) {
  if constexpr (I == N) return acc;
  else return horner_from<N, I + 1>(madd(acc, x, c[I]), x, c);
}

template <int N>
inline float horner(float x, const float (&c)[N]) { return horner_from<N>(c[0], x, c); }

// erf for float32 that g++ vectorizes (std::erf is a scalar libm call: GELU ran 4x slower than
// ATen's vectorized erf). Polynomials fitted for this file (Chebyshev least squares in float64):
//   |x| < 1:      erf(x) = x * P(x^2), P of degree 6 (relative error 1.4e-9 before rounding);
//   1 <= |x| < 4: erf(x) = 1 - exp(-x^2) * R(w), R(w) = erfc(a) exp(a^2) of degree 10 in
//                 w = (1/a - 0.625) / 0.375 (1.7e-7 relative after float rounding);
//   |x| >= 4:     +-1 (erf rounds to 1 in float32 from 3.92).
// exp(-x^2) takes the rounding error of x^2 into account (Dekker's exact split). Within 2 ulp
// of the correctly rounded erf on a dense grid (tests/compiler/test_cpp_codegen.py); NaN and
// +-inf as std::erf.
inline float erf_f32(float x) {
  static constexpr float kSmall[] = {7.882497103e-05f, -8.018854991e-04f, 5.189311942e-03f, -2.685432880e-02f,
                                     1.128359746e-01f, -3.761262690e-01f, 1.128379166e+00f};
  static constexpr float kLarge[] = {-1.834250504e-06f, 3.816594670e-06f, 1.806468752e-06f, -2.807815434e-05f,
                                     1.201970021e-04f, -3.481154057e-04f, 4.613694251e-04f, 2.308021206e-03f,
                                     -2.424301403e-02f, 1.433564145e-01f, 3.059529923e-01f};
  const float a = std::fabs(x);
  const float small = a * horner(a * a, kSmall);
  const float b = a < 1.0f ? 1.0f : (a < 4.0f ? a : 4.0f);
  const float w = (1.0f / b) * 2.66666667f - 1.66666667f;
  const float hi = b * b;  // b^2 = hi + lo exactly
  const float split = 4097.0f * b;
  const float bh = split - (split - b);
  const float bl = b - bh;
  const float lo = ((bh * bh - hi) + 2.0f * bh * bl) + bl * bl;
  const float tail = exp_f32(-hi) * (1.0f - lo) * horner(w, kLarge);
  const float y = a < 1.0f ? small : 1.0f - tail;
  return x != x ? x : std::copysign(y, x);
}

// log for float32 that g++ vectorizes (std::log is a scalar libm call). x = m 2^e with m in
// [sqrt(1/2), sqrt(2)); log(1 + f) = f - f^2/2 + f^3 Q(f), Q of degree 8 fitted for this file
// (Chebyshev least squares in float64), e ln2 added in two parts (Cody-Waite). Within 1 ulp of
// the correctly rounded log on a dense grid; subnormals, 0, negatives, inf and NaN as std::log.
inline float log_f32(float x) {
  static constexpr float kQ[] = {7.149751001e-02f, -1.157120166e-01f, 1.166151271e-01f, -1.241105061e-01f,
                                 1.424993632e-01f, -1.666848024e-01f, 2.000070749e-01f, -2.499998905e-01f,
                                 3.333333119e-01f};
  const bool subnormal = x < 1.17549435e-38f;
  const uint32_t bits = float_to_bits(subnormal ? x * 8388608.0f : x);
  int32_t e = int32_t((bits >> 23) & 0xffu) - (subnormal ? 150 : 127);
  float m = float_from_bits((bits & 0x7fffffu) | 0x3f800000u);
  const bool upper = m > 1.41421356f;
  m = upper ? m * 0.5f : m;
  e = upper ? e + 1 : e;
  const float f = m - 1.0f;
  const float f2 = f * f;
  const float ef = float(e);
  float r = f2 * f * horner(f, kQ);
  r = r - 0.5f * f2;
  r = r + ef * -2.12194440e-4f;
  r = r + f;
  r = r + ef * 0.693359375f;
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  return x != x ? x : r;
}

// Reduction lanes: a reduction keeps L independent accumulators (one per lane of the
// vectorized inner loop) and folds them at the end, in a fixed order (results do not depend
// on the vector width the compiler picks).
// L is a power of two; the fold is a tree (halves combined lane by lane, which vectorizes: a
// chain of L - 1 dependent steps per output point dominated reductions of short rows).
// A compiler barrier on a reduction's lane array between its lane loop and its tail loop (emits
// nothing): g++ 12 at -O3 with 512-bit vectors lost counts of an integer sum of 8- or 16-bit values
// when the tail loop updated the lanes the vectorized lane loop had just left in registers
// (compiler/codegen/cpp_reduction.py, harness/FINDINGS.md).
template <typename T>
inline void lanes_barrier(T* lanes) { asm volatile("" : : "r"(lanes) : "memory"); }

template <typename T, int L, typename Combine>
inline T fold_tree(const T* lanes, Combine combine) {
  static_assert((L & (L - 1)) == 0, "lane counts are powers of two");
  T tmp[L];
  for (int j = 0; j < L; ++j) tmp[j] = lanes[j];
  for (int width = L / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) tmp[j] = combine(tmp[j], tmp[j + width]);
  return tmp[0];
}

template <typename T, int L>
inline T fold_sum(const T* lanes) { return fold_tree<T, L>(lanes, fold_plus<T>); }

template <typename T, int L>
inline T fold_prod(const T* lanes) { return fold_tree<T, L>(lanes, fold_times<T>); }

template <typename T, int L>
inline T fold_max(const T* lanes) { return fold_tree<T, L>(lanes, max_nan<T>); }

template <typename T, int L>
inline T fold_min(const T* lanes) { return fold_tree<T, L>(lanes, min_nan<T>); }

// argmax/argmin lanes hold (value, flat index); index -1 marks an empty lane. ATen's rules:
// the first NaN wins, otherwise the extreme value, ties to the lowest index.
template <bool IsMax, typename T>
inline bool arg_better(T v, int64_t i, T best, int64_t best_i) {
  if (best_i < 0) return i >= 0;
  if (i < 0) return false;
  const bool v_nan = v != v, best_nan = best != best;
  if (best_nan || v_nan) return v_nan && (!best_nan || i < best_i);
  if (v == best) return i < best_i;
  return IsMax ? v > best : v < best;
}

template <bool IsMax, typename T, int L>
inline int64_t fold_arg(const T* values, const int64_t* indices, T* best_value = nullptr) {
  T best = values[0];
  int64_t best_i = indices[0];
  for (int j = 1; j < L; ++j) {
    if (arg_better<IsMax>(values[j], indices[j], best, best_i)) {
      best = values[j];
      best_i = indices[j];
    }
  }
  if (best_value != nullptr) *best_value = best;
  return best_i < 0 ? 0 : best_i;
}

// Cascade summation for long rows: the lanes are flushed into level 0 every block, and a
// level holding FAN partial sums is carried into the next, so the error grows with
// log(n) blocks rather than n (ATen's CPU sum is a cascade too).
template <typename T, int L>
struct SumCascade {
  static constexpr int LEVELS = 6;
  static constexpr int FAN = 16;
  T level[LEVELS][L] = {};
  int count[LEVELS] = {};

  void push(T* lanes) {
    for (int j = 0; j < L; ++j) {
      level[0][j] = level[0][j] + lanes[j];
      lanes[j] = T(0);
    }
    for (int i = 0; i + 1 < LEVELS && ++count[i] == FAN; ++i) {
      count[i] = 0;
      for (int j = 0; j < L; ++j) {
        level[i + 1][j] = level[i + 1][j] + level[i][j];
        level[i][j] = T(0);
      }
    }
  }

  // Each lane is its own result (one accumulator per outer point): lanes[j] = lane j's sum.
  void finish(T* lanes) {
    push(lanes);
    for (int j = 0; j < L; ++j) {
      T s = T(0);
      for (int i = 0; i < LEVELS; ++i) s = s + level[i][j];
      lanes[j] = s;
    }
  }

  T total(T* lanes) {
    push(lanes);
    T sums[L];
    for (int j = 0; j < L; ++j) {
      T s = T(0);
      for (int i = 0; i < LEVELS; ++i) s = s + level[i][j];
      sums[j] = s;
    }
    return fold_sum<T, L>(sums);
  }
};

// A SumCascade that never leaves its first level (compiler.codegen.cpp_plan.CASCADE_FAN), spelled as
// a second lane array `hi` beside the lanes; these finish it as SumCascade::finish and ::total do, bit
// for bit (the same adds in the same order, and T(0) + x as their fold of the levels).
template <typename T, int L>
inline void short_cascade_finish(T* hi, T* lanes) {
  for (int j = 0; j < L; ++j) lanes[j] = T(0) + (hi[j] + lanes[j]);
}

template <typename T, int L>
inline T short_cascade_total(T* hi, T* lanes) {
  short_cascade_finish<T, L>(hi, lanes);
  return fold_sum<T, L>(lanes);
}

}  // namespace crucible

// Read and clear the division-by-zero flag (one per kernel library; called by the launcher).
extern "C" __attribute__((visibility("default"), used)) int crucible_take_zero_division() {
  return __atomic_exchange_n(&crucible::zero_division, 0, __ATOMIC_RELAXED);
}
