// Fused CPU kernel for the attention-regression experiment's loss and closed-form gradients
// (sdyn.experiments.attention_regression.loss_and_gradients), for every run of a batch. Per query
// the (context,) row of scores, weights and gradient coefficients lives in one L1-resident buffer,
// so the (q, c) weight matrix is never formed. `threads` threads share the runs (kernel.h).
//
// Shapes (row-major, contiguous): V (B, k, d), K (B, d, d), Xc (B, c, d), Xq (B, q, d),
// Yq (B, q, k) -> loss (B,), gV (B, k, d), gK (B, d, d). For each query x_i
// (docs/theory/attention-regression.md#derived-model):
//   z_j = x_j^T K x_i,  P_ij = softmax_j(z),  m_i = sum_j P_ij x_j,  R_i = V m_i - y_i,
//   loss = sum_i |R_i|^2 / q,  G_i = 2 R_i / q,  grad_V += G_i m_i^T,  g_i = V^T G_i,
//   dL/dz_ij = P_ij (g_i^T x_j - g_i^T m_i),  h_i = sum_j dL/dz_ij x_j,  grad_K += h_i x_i^T.
// Each (i, j) pair costs 4d multiply-adds and one exp (kernel.h's, vectorised over j).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel.h"

namespace {

using sdyn::kLanes;
using sdyn::load;
using sdyn::horizontal_sum;
using sdyn::store;
using sdyn::Vec;

// out[a] = sum_j p_j XT[a, j] for a < d, XT (d, cp) with cp a multiple of the vector width: one
// pass per 4 rows, so 4 independent accumulators hide the multiply-add latency.
template <typename T>
void row_dots(int64_t d, int64_t cp, const T* XT, const T* p, T* out) {
  int64_t a = 0;
  for (; a + 4 <= d; a += 4) {
    const T* x = XT + a * cp;
    Vec<T> acc0{}, acc1{}, acc2{}, acc3{};
    for (int64_t j = 0; j < cp; j += kLanes<T>) {
      const Vec<T> pj = load<T>(p + j);
      acc0 += pj * load<T>(x + j);
      acc1 += pj * load<T>(x + cp + j);
      acc2 += pj * load<T>(x + 2 * cp + j);
      acc3 += pj * load<T>(x + 3 * cp + j);
    }
    out[a] = horizontal_sum<T>(acc0);
    out[a + 1] = horizontal_sum<T>(acc1);
    out[a + 2] = horizontal_sum<T>(acc2);
    out[a + 3] = horizontal_sum<T>(acc3);
  }
  for (; a < d; ++a) {
    Vec<T> acc{};
    for (int64_t j = 0; j < cp; j += kLanes<T>) acc += load<T>(p + j) * load<T>(XT + a * cp + j);
    out[a] = horizontal_sum<T>(acc);
  }
}

// out_j = base + sum_a w_a XT[a, j] for j < cp (shapes as row_dots).
template <typename T>
void combine_rows(int64_t d, int64_t cp, const T* XT, const T* w, T base, T* out) {
  for (int64_t j = 0; j < cp; j += kLanes<T>) {
    Vec<T> acc = Vec<T>{} + base;
    for (int64_t a = 0; a < d; ++a) acc += w[a] * load<T>(XT + a * cp + j);
    store<T>(out + j, acc);
  }
}

// Loss of one run, its gradients into gV (k, d) and gK (d, d). XcT (d, cp), z and t (cp): scratch,
// cp = c rounded up to the vector width; work (4d + k): scratch.
template <typename T>
T loss_and_gradients(int64_t c, int64_t cp, int64_t q, int64_t d, int64_t k, const T* V, const T* K,
                     const T* Xc, const T* Xq, const T* Yq, T* gV, T* gK, T* XcT, T* z, T* t,
                     T* work) {
  // Context transposed and zero-padded, so that every pass over j reads whole vectors.
  std::fill(XcT, XcT + d * cp, T(0));
  for (int64_t j = 0; j < c; ++j)
    for (int64_t a = 0; a < d; ++a) XcT[a * cp + j] = Xc[j * d + a];
  std::fill(gV, gV + k * d, T(0));
  std::fill(gK, gK + d * d, T(0));
  T* kx = work;    // K x_i (d)
  T* mu = kx + d;  // m_i (d)
  T* g = mu + d;   // g_i (d)
  T* h = g + d;    // h_i (d)
  T* G = h + d;    // G_i (k)
  const T two_over_q = T(2) / T(q);
  T loss = 0;
  for (int64_t i = 0; i < q; ++i) {
    const T* x = Xq + i * d;
    for (int64_t a = 0; a < d; ++a) {
      T acc = 0;
      for (int64_t b = 0; b < d; ++b) acc += K[a * d + b] * x[b];
      kx[a] = acc;
    }
    combine_rows(d, cp, XcT, kx, T(0), z);  // z_j
    std::fill(z + c, z + cp, -std::numeric_limits<T>::infinity());
    T zmax = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : zmax)
    for (int64_t j = 0; j < cp; ++j) zmax = z[j] > zmax ? z[j] : zmax;
    T sum = 0;  // the padding adds exp(clamp(-inf)) < 1e-37, below the rounding of sum >= 1
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cp; ++j) {
      z[j] = sdyn::vexp(z[j] - zmax);
      sum += z[j];
    }
    const T inv_sum = T(1) / sum;
#pragma omp simd
    for (int64_t j = 0; j < cp; ++j) z[j] = j < c ? z[j] * inv_sum : T(0);  // P_ij
    row_dots(d, cp, XcT, z, mu);
    const T* y = Yq + i * k;
    for (int64_t l = 0; l < k; ++l) {
      T r = -y[l];
      for (int64_t a = 0; a < d; ++a) r += V[l * d + a] * mu[a];
      loss += r * r;
      G[l] = two_over_q * r;
      for (int64_t a = 0; a < d; ++a) gV[l * d + a] += G[l] * mu[a];
    }
    T gm = 0;
    for (int64_t a = 0; a < d; ++a) {
      T acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += V[l * d + a] * G[l];
      g[a] = acc;
      gm += acc * mu[a];
    }
    combine_rows(d, cp, XcT, g, -gm, t);  // g_i^T x_j - g_i^T m_i
#pragma omp simd
    for (int64_t j = 0; j < cp; ++j) z[j] *= t[j];  // dL/dz_ij
    row_dots(d, cp, XcT, z, h);
    for (int64_t a = 0; a < d; ++a)
      for (int64_t b = 0; b < d; ++b) gK[a * d + b] += h[a] * x[b];
  }
  return loss / T(q);
}

template <typename T>
void batch(int64_t B, int64_t c, int64_t q, int64_t d, int64_t k, const T* V, const T* K,
           const T* Xc, const T* Xq, const T* Yq, T* loss, T* gV, T* gK, int64_t threads) {
  const int64_t cp = (c + kLanes<T> - 1) / kLanes<T> * kLanes<T>;
  sdyn::for_each_run(B, threads, [&]() {
    return [&, cp, XcT = std::vector<T>(d * cp), z = std::vector<T>(cp), t = std::vector<T>(cp),
            work = std::vector<T>(4 * d + k)](int64_t b) mutable {
      loss[b] = loss_and_gradients(c, cp, q, d, k, V + b * k * d, K + b * d * d, Xc + b * c * d,
                                   Xq + b * q * d, Yq + b * q * k, gV + b * k * d, gK + b * d * d,
                                   XcT.data(), z.data(), t.data(), work.data());
    };
  });
}

}  // namespace

extern "C" {
void attention_grad_f64(int64_t B, int64_t c, int64_t q, int64_t d, int64_t k, const double* V,
                        const double* K, const double* Xc, const double* Xq, const double* Yq,
                        double* loss, double* gV, double* gK, int64_t threads) {
  batch<double>(B, c, q, d, k, V, K, Xc, Xq, Yq, loss, gV, gK, threads);
}
void attention_grad_f32(int64_t B, int64_t c, int64_t q, int64_t d, int64_t k, const float* V,
                        const float* K, const float* Xc, const float* Xq, const float* Yq,
                        float* loss, float* gV, float* gK, int64_t threads) {
  batch<float>(B, c, q, d, k, V, K, Xc, Xq, Yq, loss, gV, gK, threads);
}
}
