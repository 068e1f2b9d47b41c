// Fused CPU kernels for the NTK experiment.
// - gd: its GD loop (sdyn.experiments.ntk.gd_iteration, repeated): the loss, its closed-form
//   gradient (softmax-NTK paper, Eq. 1 and Claim 3.4), the run's status and the step
//   W <- W - eta grad, for iterations t0 <= t < t1 of every run of a bundle. Each run is advanced
//   alone through all its iterations, so its W, grad and (NB, m) intermediates stay in cache.
// - jacobian: the output Jacobian that the NTK Gram matrix is made of (ntk.ntk_gram), in one pass
//   per block of points instead of torch's five over (n, m) tensors.
// - forward: the network's outputs (ntk.forward), also one pass per block of points.
// A run's arithmetic does not depend on the bundle it is in, nor on the thread that runs it:
// `threads` threads share the bundle's runs (kernel.h).
//
// Shapes (row-major, contiguous): W (B, d, m) updated in place, a (B, d_out, m), X (B, n, d),
// Y (B, n, d_out), grad (d, m) scratch; per run eta, eps, L0, L, active, diverged, hit (B,).
// For each point i (theory.md §1), with R = F(x_i) - y_i:
//   z_r = w_r^T x_i
//   softmax:  e_r = exp(z_r - max z), F_l = (m / sum_r e_r) <a_l, e>,
//             g_r = (m / sum_r e_r) e_r (sum_l R_l a_lr - <R, F>/m)
//   relu/exp: phi = relu(z) or exp(z), F_l = m^-1/2 <a_l, phi>, g_r = m^-1/2 phi'(z_r) sum_l R_l
//   a_lr L += |R|^2 / 2,  grad_kr += x_ik g_r.
// exp is kernel.h's vectorisable one (the libm exp is scalar).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel.h"

namespace {

using sdyn::kLanes;
using sdyn::load;
using sdyn::store;
using sdyn::Vec;
using sdyn::vexp;

constexpr int NB = 8;  // training points per block: (NB, m) buffers stay in L2 up to m ~ 8192
constexpr int64_t kMaxD = 64;  // largest input dimension d (the block's inputs live on the stack)

// The inputs of points i0 .. i0+nb-1 of one run, transposed and zero-padded to NB points:
// xb[k NB + j] = X[i0 + j, k].
template <typename T>
void load_block(int64_t d, int64_t i0, int64_t nb, const T* Xb, T* xb) {
  std::fill(xb, xb + NB * d, T(0));
  for (int64_t j = 0; j < nb; ++j)
    for (int64_t k = 0; k < d; ++k) xb[k * NB + j] = Xb[(i0 + j) * d + k];
}

// z_jr = sum_k x_jk W_kr for a block's NB points into zbuf (NB, m), with NB vector accumulators
// (one load of W_k per NB FMAs), and zmax_j = max_r z_jr, for the softmax.
template <typename T>
void block_logits(int64_t d, int64_t m, const T* Wb, const T* xb, T* zbuf, T* zmax) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  Vec<T> vmax[NB];
  for (int j = 0; j < NB; ++j) vmax[j] = Vec<T>{} + kNegInf;
  int64_t r = 0;
  for (; r + kLanes<T> <= m; r += kLanes<T>) {
    Vec<T> acc[NB] = {};
    for (int64_t k = 0; k < d; ++k) {
      const Vec<T> w = load<T>(Wb + k * m + r);
      for (int j = 0; j < NB; ++j) acc[j] += xb[k * NB + j] * w;
    }
    for (int j = 0; j < NB; ++j) {
      store<T>(zbuf + j * m + r, acc[j]);
      vmax[j] = acc[j] > vmax[j] ? acc[j] : vmax[j];
    }
  }
  for (int j = 0; j < NB; ++j) {
    zmax[j] = kNegInf;
    for (int64_t lane = 0; lane < kLanes<T>; ++lane)
      zmax[j] = vmax[j][lane] > zmax[j] ? vmax[j][lane] : zmax[j];
  }
  for (; r < m; ++r)
    for (int j = 0; j < NB; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < d; ++k) acc += xb[k * NB + j] * Wb[k * m + r];
      zbuf[j * m + r] = acc;
      zmax[j] = acc > zmax[j] ? acc : zmax[j];
    }
}

// The outputs F_l = scale <a_l, phi> (l < d_out) of one point, whose logits z (m) become phi:
// softmax e = exp(z - zmax), unnormalised (scale = m / sum_r e_r); exp e^z (scale = m^-1/2);
// relu keeps z (the gradient needs its sign) and reads max(z, 0) (scale = m^-1/2). The dot with
// a_0 shares the activation's pass. A NaN/Inf z makes F, and so the loss, NaN: divergence stays
// visible. Returns scale.
template <typename T>
T point_outputs(int64_t m, int64_t d_out, int activation, const T* ab, T zmax, T* z, T* F) {
  T scale, dot0 = 0;
  const T* a0 = ab;
  if (activation == 0) {
    T sum = 0;
#pragma omp simd reduction(+ : sum, dot0)
    for (int64_t r = 0; r < m; ++r) {
      z[r] = vexp(z[r] - zmax);
      sum += z[r];
      dot0 += z[r] * a0[r];
    }
    scale = T(m) / sum;
  } else {
    scale = T(1) / std::sqrt(T(m));
    if (activation == 1) {
#pragma omp simd reduction(+ : dot0)
      for (int64_t r = 0; r < m; ++r) dot0 += (z[r] > T(0) ? z[r] : T(0)) * a0[r];
    } else {
#pragma omp simd reduction(+ : dot0)
      for (int64_t r = 0; r < m; ++r) {
        z[r] = vexp(z[r]);
        dot0 += z[r] * a0[r];
      }
    }
  }
  F[0] = scale * dot0;
  for (int64_t l = 1; l < d_out; ++l) {
    const T* al = ab + l * m;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t r = 0; r < m; ++r) dot += (activation == 1 && z[r] < T(0) ? T(0) : z[r]) * al[r];
    F[l] = scale * dot;
  }
  return scale;
}

// Loss of one run at W, and its gradient into grad (d, m). zbuf (NB m), R (d_out), ra (m): scratch.
template <typename T>
T loss_and_gradient(int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, const T* Wb,
                    const T* ab, const T* Xb, const T* Yb, T* gb, T* zbuf, T* R, T* ra) {
  const T mm = T(m);
  std::fill(gb, gb + d * m, T(0));
  T loss = 0;
  for (int64_t i0 = 0; i0 < n; i0 += NB) {
    const int64_t nb = std::min<int64_t>(NB, n - i0);
    T xb[NB * kMaxD];
    load_block(d, i0, nb, Xb, xb);
    T zmax[NB];
    block_logits(d, m, Wb, xb, zbuf, zmax);
    // Per point: activation, outputs F (into R), residual R, loss; z is overwritten by g.
    for (int64_t j = 0; j < nb; ++j) {
      T* z = zbuf + j * m;
      const T* y = Yb + (i0 + j) * d_out;
      const T* a0 = ab;
      const T scale = point_outputs(m, d_out, activation, ab, zmax[j], z, R);
      T c = 0;  // softmax: <R, F> / m, the part of g shared by all neurons
      for (int64_t l = 0; l < d_out; ++l) {
        const T F = R[l];
        R[l] = F - y[l];
        loss += T(0.5) * R[l] * R[l];
        if (activation == 0) c += R[l] * F / mm;
      }
      // g_r = scale phi'(z_r) (ra_r - c), ra_r = sum_l R_l a_lr; phi' = e for softmax/exp
      // and 1[z > 0] for relu. One output (the common case) needs no ra buffer.
      const T* ra_or_a0 = a0;
      T R0 = R[0];
      if (d_out > 1) {
#pragma omp simd
        for (int64_t r = 0; r < m; ++r) ra[r] = R0 * a0[r];
        for (int64_t l = 1; l < d_out; ++l) {
          const T* al = ab + l * m;
          const T Rl = R[l];
#pragma omp simd
          for (int64_t r = 0; r < m; ++r) ra[r] += Rl * al[r];
        }
        ra_or_a0 = ra;
        R0 = T(1);
      }
      if (activation == 1) {
#pragma omp simd
        for (int64_t r = 0; r < m; ++r) z[r] = z[r] > T(0) ? scale * R0 * ra_or_a0[r] : T(0);
      } else {
#pragma omp simd
        for (int64_t r = 0; r < m; ++r) z[r] = scale * z[r] * (R0 * ra_or_a0[r] - c);
      }
    }
    // grad_kr += sum_j x_jk g_jr, the NB values g_jr in registers: one load and store of
    // grad_kr per NB FMAs. Padded rows have x = 0 and g = 0.
    for (int64_t j = nb; j < NB; ++j) std::fill(zbuf + j * m, zbuf + (j + 1) * m, T(0));
    int64_t r2 = 0;
    for (; r2 + kLanes<T> <= m; r2 += kLanes<T>) {
      Vec<T> g[NB];
      for (int j = 0; j < NB; ++j) g[j] = load<T>(zbuf + j * m + r2);
      for (int64_t k = 0; k < d; ++k) {
        Vec<T> s = load<T>(gb + k * m + r2);
        for (int j = 0; j < NB; ++j) s += xb[k * NB + j] * g[j];
        store<T>(gb + k * m + r2, s);
      }
    }
    for (; r2 < m; ++r2)
      for (int64_t k = 0; k < d; ++k)
        for (int j = 0; j < NB; ++j) gb[k * m + r2] += xb[k * NB + j] * zbuf[j * m + r2];
  }
  return loss;
}

// One GD iteration t of every run (sdyn.experiments.ntk.gd_iteration), for t0 <= t < t1: L(t),
// then the status (reached eps: hit = t and frozen; NaN/Inf or L/L0 > divergence: diverged and
// frozen), then W <- W - eta grad for runs still active. Frozen runs are skipped: their W, and
// so their loss, no longer change.
template <typename T>
void gd(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, T* W, const T* a,
        const T* X, const T* Y, const T* eta, const T* eps, const T* L0, T divergence, int64_t t0,
        int64_t t1, T* L, bool* active, bool* diverged, int64_t* hit, int64_t threads) {
  sdyn::for_each_run(B, threads, [&]() {
    return [&, grad = std::vector<T>(d * m), zbuf = std::vector<T>(NB * m),
            R = std::vector<T>(d_out), ra = std::vector<T>(m)](int64_t b) mutable {
      T* Wb = W + b * d * m;
      for (int64_t t = t0; t < t1 && active[b]; ++t) {
        const T loss =
            loss_and_gradient(n, d, m, d_out, activation, Wb, a + b * d_out * m, X + b * n * d,
                              Y + b * n * d_out, grad.data(), zbuf.data(), R.data(), ra.data());
        L[b] = loss;
        const T rel = loss / L0[b];
        const bool bad = !std::isfinite(loss) || rel > divergence;
        if (bad) {
          diverged[b] = true;
          active[b] = false;
        } else if (rel <= eps[b]) {
          if (hit[b] < 0) hit[b] = t;
          active[b] = false;
        } else {
          const T step = eta[b];
#pragma omp simd
          for (int64_t r = 0; r < d * m; ++r) Wb[r] -= step * grad[r];
        }
      }
    };
  });
}

// For each point i of each run b: its logits z_r = w_r^T x_i (m values, scratch that the callback
// may overwrite) and their max, formed per block of NB points (block_logits), then
// point(b, i, z, zmax). `threads` threads share the runs (kernel.h).
template <typename T, typename Point>
void for_each_point(int64_t B, int64_t n, int64_t d, int64_t m, const T* W, const T* X,
                    int64_t threads, const Point& point) {
  sdyn::for_each_run(B, threads, [&]() {
    return [&, zbuf = std::vector<T>(NB * m)](int64_t b) mutable {
      const T *Wb = W + b * d * m, *Xb = X + b * n * d;
      for (int64_t i0 = 0; i0 < n; i0 += NB) {
        const int64_t nb = std::min<int64_t>(NB, n - i0);
        T xb[NB * kMaxD];
        load_block(d, i0, nb, Xb, xb);
        T zmax[NB];
        block_logits(d, m, Wb, xb, zbuf.data(), zmax);
        for (int64_t j = 0; j < nb; ++j) point(b, i0 + j, zbuf.data() + j * m, zmax[j]);
      }
    };
  });
}

// The outputs of every run (sdyn.experiments.ntk.forward), F (B, n, d_out), in one pass per
// block of points: the (n, m) activations are never formed.
template <typename T>
void forward(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, const T* W,
             const T* a, const T* X, T* F, int64_t threads) {
  for_each_point(B, n, d, m, W, X, threads, [&](int64_t b, int64_t i, T* z, T zmax) {
    point_outputs(m, d_out, activation, a + b * d_out * m, zmax, z, F + (b * n + i) * d_out);
  });
}

// The output Jacobian of every run (sdyn.experiments.ntk.output_jacobian), output-major: E (B,
// d_out, n, m) with E[l, i, r] = dF_{i,l} / d(w_r^T x_i), the rows of the NTK Gram matrix's
// factor. Softmax: m S_ir (a_lr - <a_l, S_i>); relu/exp: a_lr phi'(z_ir) / sqrt(m).
template <typename T>
void jacobian(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, const T* W,
              const T* a, const T* X, T* E, int64_t threads) {
  const T mm = T(m), inv_sqrt_m = T(1) / std::sqrt(T(m));
  for_each_point(B, n, d, m, W, X, threads, [&](int64_t b, int64_t i, T* z, T zmax) {
    if (activation == 0) {  // z <- S_i, the softmax
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t r = 0; r < m; ++r) {
        z[r] = vexp(z[r] - zmax);
        sum += z[r];
      }
      const T inv = T(1) / sum;
#pragma omp simd
      for (int64_t r = 0; r < m; ++r) z[r] *= inv;
    } else if (activation == 1) {  // z <- 1[z > 0] / sqrt(m)
#pragma omp simd
      for (int64_t r = 0; r < m; ++r) z[r] = z[r] > T(0) ? inv_sqrt_m : T(0);
    } else {  // z <- exp(z) / sqrt(m)
#pragma omp simd
      for (int64_t r = 0; r < m; ++r) z[r] = vexp(z[r]) * inv_sqrt_m;
    }
    for (int64_t l = 0; l < d_out; ++l) {
      const T* al = a + (b * d_out + l) * m;
      T* El = E + ((b * d_out + l) * n + i) * m;
      if (activation == 0) {
        T alpha = 0;  // <a_l, S_i>
#pragma omp simd reduction(+ : alpha)
        for (int64_t r = 0; r < m; ++r) alpha += al[r] * z[r];
#pragma omp simd
        for (int64_t r = 0; r < m; ++r) El[r] = mm * z[r] * (al[r] - alpha);
      } else {
#pragma omp simd
        for (int64_t r = 0; r < m; ++r) El[r] = al[r] * z[r];
      }
    }
  });
}

}  // namespace

extern "C" {
void ntk_gd_f64(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation,
                double* W, const double* a, const double* X, const double* Y, const double* eta,
                const double* eps, const double* L0, double divergence, int64_t t0, int64_t t1,
                double* L, bool* active, bool* diverged, int64_t* hit, int64_t threads) {
  gd<double>(B, n, d, m, d_out, activation, W, a, X, Y, eta, eps, L0, divergence, t0, t1, L, active,
             diverged, hit, threads);
}
void ntk_gd_f32(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, float* W,
                const float* a, const float* X, const float* Y, const float* eta, const float* eps,
                const float* L0, float divergence, int64_t t0, int64_t t1, float* L, bool* active,
                bool* diverged, int64_t* hit, int64_t threads) {
  gd<float>(B, n, d, m, d_out, activation, W, a, X, Y, eta, eps, L0, divergence, t0, t1, L, active,
            diverged, hit, threads);
}
// The per-block functions share one signature: (B, n, d, m, d_out, activation, W, a, X, out,
// threads).
#define NTK_BLOCK_ENTRY(fn, T, suffix)                                                 \
  void ntk_##fn##_##suffix(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out,  \
                           int activation, const T* W, const T* a, const T* X, T* out, \
                           int64_t threads) {                                          \
    fn<T>(B, n, d, m, d_out, activation, W, a, X, out, threads);                       \
  }
NTK_BLOCK_ENTRY(jacobian, double, f64)
NTK_BLOCK_ENTRY(jacobian, float, f32)
NTK_BLOCK_ENTRY(forward, double, f64)
NTK_BLOCK_ENTRY(forward, float, f32)
}
