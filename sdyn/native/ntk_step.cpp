// Fused CPU kernels for the NTK experiment.
// - gd: its GD loop (sdyn.experiments.ntk.gd_iteration, repeated): the loss, its closed-form
//   gradient (softmax-NTK paper, Eq. 1 and Claim 3.4), the run's status and the step
//   W <- W - eta grad, for iterations t0 <= t < t1 of every run of a bundle. Each run is advanced
//   alone through all its iterations, so its W, grad and (NB, m) intermediates stay in cache.
//   Its vectors hold neurons, or, at small widths (point_vectors), points: one vector per neuron
//   for a block of kLanes points, so that m < kLanes still fills them.
// - jacobian: the output Jacobian that the NTK Gram matrix is made of (ntk.ntk_gram), in one pass
//   per block of points instead of torch's five over (n, m) tensors.
// - forward: the network's outputs (ntk.forward), also one pass per block of points.
// A run's arithmetic does not depend on the bundle it is in, nor on the thread that runs it:
// `threads` threads share the bundle's runs (kernel.h).
//
// Shapes (row-major, contiguous): W (B, d, m) updated in place, a (B, d_out, m), X (B, n, d),
// Y (B, n, d_out), grad (d, m) scratch; per run eta, eps, L0, L, active, diverged, hit (B,).
// For each point i (docs/theory/softmax-ntk.md#setting), with R = F(x_i) - y_i:
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
#include <type_traits>
#include <vector>

#include "kernel.h"

namespace {

using sdyn::kLanes;
using sdyn::horizontal_sum;
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

// Small widths: vectors over points instead of neurons, so that no loop runs scalar or once per
// point. A run's inputs and labels are laid out once per call as blocks of P = kLanes points,
// xt[blk d + k] = (X[blk P + j, k])_j and yt[blk d_out + l] = (Y[blk P + j, l])_j, zero-padded.
// Measured (d = 8, one thread), this path is faster for every m < kLanes (the neuron vectors
// would be partly empty) and, as its d m sums across lanes per step are amortised over the
// blocks, for m up to about 16 n / kLanes; capped at m = 128 (at n = 512 it loses from m = 512 on,
// its (n / P, m) buffer of g then outgrowing the L2).
template <typename T>
bool point_vectors(int64_t n, int64_t m) {
  return m < kLanes<T> || (m <= 128 && m * kLanes<T> <= 16 * n);
}

// A buffer of vectors (std::vector<Vec<T>> would drop Vec's vector attribute).
template <typename T>
struct VecBuffer {
  struct Lanes {
    Vec<T> v;
  };
  std::vector<Lanes> lanes;
  explicit VecBuffer(int64_t size) : lanes(size) {}
  Vec<T>* data() { return &lanes.data()->v; }
};

template <typename T>
void load_point_blocks(int64_t n, int64_t d, int64_t d_out, const T* Xb, const T* Yb, Vec<T>* xt,
                       Vec<T>* yt) {
  constexpr int64_t P = kLanes<T>;
  const int64_t nblk = (n + P - 1) / P;
  std::fill(xt, xt + nblk * d, Vec<T>{});
  std::fill(yt, yt + nblk * d_out, Vec<T>{});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < d; ++k) xt[i / P * d + k][i % P] = Xb[i * d + k];
    for (int64_t l = 0; l < d_out; ++l) yt[i / P * d_out + l][i % P] = Yb[i * d_out + l];
  }
}

// kernel.h's vexp, lane by lane on a vector: its loop form would store each vector as two
// halves (GCC's preferred 256-bit width) and reload it whole, which stalls store forwarding.
template <typename T>
Vec<T> vexp_lanes(Vec<T> x) {
  using C = sdyn::ExpConst<T>;
  using Int = typename C::Int;
  using IVec __attribute__((vector_size(64))) = Int;
  const Vec<T> lo = Vec<T>{} + C::lo, hi = Vec<T>{} + C::hi;
  x = x < lo ? lo : x;  // NaN passes through
  x = x > hi ? hi : x;
  const Vec<T> shifted = x * T(1.4426950408889634) + C::shifter;
  const Vec<T> k = shifted - C::shifter;
  const Vec<T> r = (x - k * C::ln2_hi) - k * C::ln2_lo;
  Vec<T> p = Vec<T>{} + T(sdyn::kInvFactorial[C::degree]);
  for (int j = C::degree - 1; j >= 0; --j) p = p * r + T(sdyn::kInvFactorial[j]);
  IVec bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  bits = (bits << C::mantissa) + (Int(C::bias) << C::mantissa);
  Vec<T> scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// f(R, r) for the neurons r .. r+R-1 of 0 .. m-1 in chunks of R = 8, 4, 2, 1 (a compile-time
// std::integral_constant): R accumulators in registers per pass.
template <typename F>
void by_chunks(int64_t m, F f) {
  int64_t r = 0;
  for (; r + 8 <= m; r += 8) f(std::integral_constant<int, 8>{}, r);
  if (r + 4 <= m) f(std::integral_constant<int, 4>{}, r), r += 4;
  if (r + 2 <= m) f(std::integral_constant<int, 2>{}, r), r += 2;
  if (r < m) f(std::integral_constant<int, 1>{}, r);
}

// loss_and_gradient for small m on point blocks (load_point_blocks), in two passes. 1: per block,
// z (m vectors) becomes phi, and g_r goes to gv[blk m + r]; F, R, ra (d_out) are vectors over
// the block's points. A padded point has x = 0 and its R and g masked to 0, so it adds exactly 0
// to the loss and gradient. 2: grad_kr = sum_blk x_k g_r in registers, then summed across lanes.
template <typename T>
T loss_and_gradient_small(int64_t n, int64_t d, int64_t m, int64_t d_out, int activation,
                          const T* Wb, const T* ab, const Vec<T>* xt, const Vec<T>* yt, T* gb,
                          Vec<T>* z, Vec<T>* gv, Vec<T>* gsum, Vec<T>* R) {
  constexpr int64_t P = kLanes<T>;
  const int64_t nblk = (n + P - 1) / P;
  const Vec<T> zero = {};
  Vec<T> lane;  // (0, 1, .., P-1): a block's points with lane < live exist
  for (int64_t j = 0; j < P; ++j) lane[j] = T(j);
  const T mm = T(m), inv_sqrt_m = T(1) / std::sqrt(mm);
  Vec<T> loss = {};
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const Vec<T>* x = xt + blk * d;
    const Vec<T>* y = yt + blk * d_out;
    // z_r = sum_k x_k W_kr, and zmax = max_r z_r (for the softmax) while z is in registers.
    Vec<T> zmax = Vec<T>{} - std::numeric_limits<T>::infinity();
    by_chunks(m, [&](auto chunk, int64_t r) {
      constexpr int kR = decltype(chunk)::value;
      Vec<T> acc[kR] = {};
      for (int64_t k = 0; k < d; ++k)
        for (int i = 0; i < kR; ++i) acc[i] += x[k] * Wb[k * m + r + i];
      for (int i = 0; i < kR; ++i) z[r + i] = acc[i];
      for (int h = kR / 2; h > 0; h /= 2)
        for (int i = 0; i < h; ++i) acc[i] = acc[i + h] > acc[i] ? acc[i + h] : acc[i];
      zmax = acc[0] > zmax ? acc[0] : zmax;
    });
    // phi (in z; relu keeps z for its sign) and F_l = scale <a_l, phi> (into R).
    Vec<T> scale = Vec<T>{} + inv_sqrt_m;
    if (activation == 1) {
      for (int64_t l = 0; l < d_out; ++l) {
        Vec<T> dot = {};
        for (int64_t r = 0; r < m; ++r) dot += (z[r] > zero ? z[r] : zero) * ab[l * m + r];
        R[l] = scale * dot;
      }
    } else {
      if (activation == 2) zmax = zero;  // exp: phi = exp(z - 0)
      Vec<T> sum = {}, dot0 = {};
      for (int64_t r = 0; r < m; ++r) {
        z[r] = vexp_lanes<T>(z[r] - zmax);
        sum += z[r];
        dot0 += z[r] * ab[r];
      }
      if (activation == 0) scale = mm / sum;
      R[0] = scale * dot0;
      for (int64_t l = 1; l < d_out; ++l) {
        Vec<T> dot = {};
        for (int64_t r = 0; r < m; ++r) dot += z[r] * ab[l * m + r];
        R[l] = scale * dot;
      }
    }
    // R = F - y on live points, 0 on padded ones; c = <R, F> / m (softmax).
    const int64_t nlive = std::min<int64_t>(P, n - blk * P);
    const Vec<T> live = Vec<T>{} + T(nlive);
    Vec<T> c = {};
    for (int64_t l = 0; l < d_out; ++l) {
      const Vec<T> F = R[l];
      R[l] = lane < live ? F - y[l] : zero;
      loss += T(0.5) * R[l] * R[l];
      c += R[l] * F;
    }
    c = activation == 0 ? c / mm : zero;
    // g_r = scale phi'(z_r) (ra_r - c), ra_r = sum_l R_l a_lr.
    Vec<T>* g = gv + blk * m;
    for (int64_t r = 0; r < m; ++r) {
      Vec<T> ra = R[0] * ab[r];
      for (int64_t l = 1; l < d_out; ++l) ra += R[l] * ab[l * m + r];
      g[r] = activation == 1 ? (z[r] > zero ? scale * ra : zero) : scale * z[r] * (ra - c);
    }
    if (nlive < P)  // g = 0 on padded points even where W, and so their phi, is not finite
      for (int64_t r = 0; r < m; ++r) g[r] = lane < live ? g[r] : zero;
  }
  for (int64_t k = 0; k < d; ++k)
    by_chunks(m, [&](auto chunk, int64_t r) {
      constexpr int kR = decltype(chunk)::value;
      Vec<T> acc[kR] = {};
      for (int64_t blk = 0; blk < nblk; ++blk)
        for (int i = 0; i < kR; ++i) acc[i] += xt[blk * d + k] * gv[blk * m + r + i];
      for (int i = 0; i < kR; ++i) gsum[k * m + r + i] = acc[i];
    });
  // Sums across lanes, d m at once (vectorised over kr).
  const T* gs = reinterpret_cast<const T*>(gsum);
#pragma omp simd
  for (int64_t kr = 0; kr < d * m; ++kr) {
    T s = 0;
    for (int64_t j = 0; j < P; ++j) s += gs[kr * P + j];
    gb[kr] = s;
  }
  return horizontal_sum<T>(loss);
}

// One GD iteration t of every run (sdyn.experiments.ntk.gd_iteration), for t0 <= t < t1: L(t),
// then the status (reached eps: hit = t and frozen; NaN/Inf or L/L0 > divergence: diverged and
// frozen), then W <- W - eta grad for runs still active. Frozen runs are skipped: their W, and
// so their loss, no longer change.
template <typename T>
void gd(int64_t B, int64_t n, int64_t d, int64_t m, int64_t d_out, int activation, T* W, const T* a,
        const T* X, const T* Y, const T* eta, const T* eps, const T* L0, T divergence, int64_t t0,
        int64_t t1, T* L, bool* active, bool* diverged, int64_t* hit, int64_t threads) {
  const bool small = point_vectors<T>(n, m);
  const int64_t nblk = (n + kLanes<T> - 1) / kLanes<T>;
  sdyn::for_each_run(B, threads, [&]() {
    return [&, grad = std::vector<T>(d * m), zbuf = std::vector<T>(small ? 0 : NB * m),
            R = std::vector<T>(d_out), ra = std::vector<T>(m),
            xt = VecBuffer<T>(small ? nblk * d : 0), yt = VecBuffer<T>(small ? nblk * d_out : 0),
            zv = VecBuffer<T>(small ? m : 0), gv = VecBuffer<T>(small ? nblk * m : 0),
            gsum = VecBuffer<T>(small ? d * m : 0),
            Rv = VecBuffer<T>(small ? d_out : 0)](int64_t b) mutable {
      T* Wb = W + b * d * m;
      const T *ab = a + b * d_out * m, *Xb = X + b * n * d, *Yb = Y + b * n * d_out;
      if (small && active[b]) load_point_blocks<T>(n, d, d_out, Xb, Yb, xt.data(), yt.data());
      for (int64_t t = t0; t < t1 && active[b]; ++t) {
        const T loss = small ? loss_and_gradient_small<T>(n, d, m, d_out, activation, Wb, ab,
                                                       xt.data(), yt.data(), grad.data(),
                                                       zv.data(), gv.data(), gsum.data(), Rv.data())
                             : loss_and_gradient(n, d, m, d_out, activation, Wb, ab, Xb, Yb,
                                                 grad.data(), zbuf.data(), R.data(), ra.data());
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
