// Shared by sdyn's CPU kernels (ntk_step.cpp, attention_step.cpp): a vectorisable exp, GCC/Clang
// vector-extension helpers, and the threads that share a batch's runs. Header-only; sdyn.native
// puts the headers next to a kernel in its build's cache key.
//
// exp is a Cody-Waite reduction and a Taylor polynomial, written so that the compiler vectorises
// the loops that call it (the libm exp is scalar).

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace sdyn {

template <typename T>
struct ExpConst;
template <>
struct ExpConst<double> {
  // exp(x) = 2^k exp(r), r = x - k ln2 in [-ln2/2, ln2/2]; Taylor to r^12 (truncation < 2e-16).
  static constexpr double lo = -708.0, hi = 709.0;
  static constexpr double ln2_hi = 0.693147180369123816490, ln2_lo = 1.90821492927058770002e-10;
  static constexpr double shifter = 0x1.8p52;  // x + shifter rounds x to an integer in the low bits
  static constexpr int degree = 12;
  using Int = int64_t;
  static constexpr int mantissa = 52, bias = 1023;
};
template <>
struct ExpConst<float> {
  // Taylor to r^7 (truncation < 6e-9).
  static constexpr float lo = -87.0f, hi = 88.0f;
  static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  static constexpr float shifter = 0x1.8p23f;
  static constexpr int degree = 7;
  using Int = int32_t;
  static constexpr int mantissa = 23, bias = 127;
};

// 1/j!, j = 0..12: the Taylor coefficients of exp.
constexpr double kInvFactorial[13] = {
    1.0,        1.0,         1.0 / 2,      1.0 / 6,       1.0 / 24,       1.0 / 120,      1.0 / 720,
    1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};

// Explicit SIMD (GCC/Clang vector extensions) for the two register-blocked products; 64 bytes is
// one AVX-512 register, two AVX2 ones elsewhere.
template <typename T>
using Vec __attribute__((vector_size(64))) = T;
template <typename T>
constexpr int64_t kLanes = 64 / sizeof(T);
template <typename T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof(v));
}
// The sum of a vector's lanes, in lane order (so a run's result does not depend on the caller).
template <typename T>
inline T horizontal_sum(Vec<T> v) {
  T sum = 0;
  for (int64_t lane = 0; lane < kLanes<T>; ++lane) sum += v[lane];
  return sum;
}

template <typename T>
inline T vexp(T x) {
  using C = ExpConst<T>;
  using Int = typename C::Int;
  // Clamp so that 2^k stays a normal number; NaN passes through (comparisons are false).
  x = x < C::lo ? C::lo : x;
  x = x > C::hi ? C::hi : x;
  // Round x log2(e) to the integer k with the shifter trick (no float-to-int conversion).
  const T shifted = x * T(1.4426950408889634) + C::shifter;
  const T k = shifted - C::shifter;
  const T r = (x - k * C::ln2_hi) - k * C::ln2_lo;
  T p = T(kInvFactorial[C::degree]);
  for (int j = C::degree - 1; j >= 0; --j) p = p * r + T(kInvFactorial[j]);
  // 2^k: the low mantissa bits of `shifted` hold k; move them into the exponent field.
  Int bits;
  std::memcpy(&bits, &shifted, sizeof(T));
  bits = (bits << C::mantissa) + (Int(C::bias) << C::mantissa);
  T scale;
  std::memcpy(&scale, &bits, sizeof(T));
  return p * scale;
}

// body = make_body() once per thread (its scratch), then body(b) for runs b = 0..B-1, on up to
// `threads` OpenMP threads, each taking the next run as it finishes one. Each run is done by one
// thread alone, so its arithmetic does not depend on the thread count. The OpenMP runtime is the
// one PyTorch loaded (libgomp), so its idle threads do these runs instead of spinning beside them.
template <typename MakeBody>
void for_each_run(int64_t B, int64_t threads, MakeBody make_body) {
#pragma omp parallel num_threads(std::max<int64_t>(1, std::min(threads, B)))
  {
    auto body = make_body();
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < B; ++b) body(b);
  }
}

}  // namespace sdyn
