// CPU fused attention, forward and backward (Note [Fused attention] in
// tensor/attention.h): blocks of queries against blocks of keys, the block
// products through Kiln's GEMM (tensor/cpu/gemm.h, whose SIMD micro-kernels
// are chosen at run time), the exponentials through the SIMD exp of the
// softmax kernels. Float32 computes in float32 and float64 in float64.
//
// Layout: q, k, v, out, grad_out and the gradients need only their last dim
// contiguous (tensor/backend.h); a Heads view addresses row (bh, i) of each
// through its (B, H, T) strides, and the block products take those row
// strides as they are (the GEMM packs its blocks anyway), so the heads of a
// (B, T, 3E) projection are read in place.
//
// Threads: the forward splits (batch * head, query block) pairs, which are
// independent. The backward gives each thread whole (batch * head) slices:
// every query block adds into every key block's dK and dV, so a slice owned
// by one thread needs no locks and no per-thread copies of dK and dV.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/attention.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {
namespace {

// Queries and keys per block: a (64, 64) block of scores is 16 KB in
// float32, so the scores, the probabilities and the query block stay in L1/L2
// while a key block streams past.
constexpr int64_t kBlockQ = 64, kBlockK = 64;

// C (m, n) = alpha * A (m, k) @ B (k, n) + beta * C with element (i, j) of X
// at X[i * rsX + j * csX]; one thread (the callers already run in parallel).
void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa, int64_t csa, const float* b,
          int64_t rsb, int64_t csb, float beta, float* c, int64_t rsc) {
  sgemm(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1);
}
void gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t rsa, int64_t csa, const double* b,
          int64_t rsb, int64_t csb, double beta, double* c, int64_t rsc) {
  dgemm(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1);
}

// x[0..n) = exp(x[0..n)); exp(-inf) = 0.
void exp_inplace(float* x, int64_t n) { exp_f32(x, x, n); }
void exp_inplace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

// A (B, H, T, X) tensor of T with its last dim contiguous: row i of
// batch-head bh starts at row(bh, i), and rows are `rs` apart.
template <class T>
struct Heads {
  T* data;
  int64_t h, sb, sh, rs;

  explicit Heads(const Tensor& t)
      : data(t.data<std::remove_const_t<T>>()), h(t.size(1)), sb(t.stride(0)), sh(t.stride(1)), rs(t.stride(2)) {}
  T* row(int64_t bh, int64_t i) const { return data + (bh / h) * sb + (bh % h) * sh + i * rs; }
};

// The mask as (B, H, Tq, Tk) strides over one of its dtypes; `data` is null
// when there is none.
template <class T>
struct MaskView {
  const T* scores = nullptr;  // floating: added to the scores
  const bool* keep = nullptr;  // Bool: true attends
  int64_t sb = 0, sh = 0, si = 0, sj = 0;

  explicit MaskView(const Tensor& mask) {
    if (!mask.defined()) return;
    sb = mask.stride(0);
    sh = mask.stride(1);
    si = mask.stride(2);
    sj = mask.stride(3);
    if (mask.dtype() == DType::Bool) {
      keep = mask.data<bool>();
    } else {
      scores = mask.data<T>();
    }
  }
};

// What both passes share: sizes, params and the mask.
template <class T>
struct Problem {
  int64_t b, h, tq, tk, d, dv;
  T scale;
  bool causal;
  MaskView<T> mask;
  // Dropout (threshold 0: none).
  uint32_t threshold = 0;
  T keep_scale = 1;
  uint64_t seed = 0, offset = 0;

  Problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m, const AttentionParams& p)
      : b(q.size(0)),
        h(q.size(1)),
        tq(q.size(2)),
        tk(k.size(2)),
        d(q.size(3)),
        dv(v.size(3)),
        scale(static_cast<T>(p.scale)),
        causal(p.causal),
        mask(m) {
    if (p.dropout_p > 0) {
      threshold = ops::attention_dropout_threshold(p.dropout_p);
      keep_scale = static_cast<T>(ops::attention_dropout_scale(threshold));
      seed = p.seed;
      offset = p.offset;
    }
  }

  // Keys [0, end) can be attended by queries [.., i_end): causal blocks
  // beyond the diagonal are skipped whole.
  int64_t key_end(int64_t i_end) const { return causal ? std::min(tk, i_end) : tk; }

  // How many of keys j0 .. j0 + cols query i can attend: causal masking
  // leaves a prefix of them (keys j <= i), whose scores alone need the mask,
  // the max and the exponential; the rest have probability 0. On the
  // diagonal blocks of a causal mask this is half the exponentials.
  int64_t live_cols(int64_t i, int64_t j0, int64_t cols) const {
    return causal ? std::clamp<int64_t>(i + 1 - j0, 0, cols) : cols;
  }

  // Adds the mask to scores s[0..cols) of query i (batch-head bh) against
  // keys j0.. ; the causal mask is the callers' (live_cols).
  void mask_row(T* s, int64_t bh, int64_t i, int64_t j0, int64_t cols) const {
    const int64_t at = (bh / h) * mask.sb + (bh % h) * mask.sh + i * mask.si + j0 * mask.sj;
    if (mask.scores) {
      for (int64_t c = 0; c < cols; ++c) s[c] += mask.scores[at + c * mask.sj];
    } else if (mask.keep) {
      for (int64_t c = 0; c < cols; ++c) {
        if (!mask.keep[at + c * mask.sj]) s[c] = -std::numeric_limits<T>::infinity();
      }
    }
  }

  // f[0..cols) = the dropout factors (0 or keep_scale) of query i against
  // keys j0.. (Note [Fused attention]: keyed by the element's number).
  void dropout_row(T* f, int64_t bh, int64_t i, int64_t j0, int64_t cols) const {
    const uint64_t e0 = static_cast<uint64_t>((bh * tq + i) * tk + j0);
    for (int64_t c = 0; c < cols;) {
      const uint64_t e = e0 + static_cast<uint64_t>(c);
      const philox::Block block = philox::element_block(seed, offset, e / 8);
      // The half-words of this block that belong to this row.
      for (uint64_t w = e % 8; w < 8 && c < cols; ++w, ++c) {
        const uint32_t word = block.w[w / 2];
        const uint32_t half = (w % 2 == 0) ? (word & 0xFFFFu) : (word >> 16);
        f[c] = half >= threshold ? keep_scale : T(0);
      }
    }
  }
};

// One query block [i0, i0 + rows) of batch-head bh: out rows and their
// logsumexp. s: (kBlockQ, kBlockK) scratch; m, l: (kBlockQ) scratch.
template <class T, class L>
void forward_block(const Problem<T>& pb, int64_t bh, int64_t i0, int64_t rows, const Heads<const T>& q,
                   const Heads<const T>& k, const Heads<const T>& v, const Heads<T>& out, L* lse, T* s, T* m, T* l,
                   T* f) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t d = pb.d, dv = pb.dv;
  const T* qb = q.row(bh, i0);  // (rows, D), row stride q.rs
  const T* kh = k.row(bh, 0);   // (Tk, D), row stride k.rs
  const T* vh = v.row(bh, 0);   // (Tk, Dv), row stride v.rs
  T* ob = out.row(bh, i0);      // (rows, Dv), row stride out.rs: the unnormalised output o until the end
  for (int64_t r = 0; r < rows; ++r) std::fill(ob + r * out.rs, ob + r * out.rs + dv, T(0));
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, T(0));
  const int64_t j_end = pb.key_end(i0 + rows);
  for (int64_t j0 = 0; j0 < j_end; j0 += kBlockK) {
    const int64_t cols = std::min(kBlockK, j_end - j0);
    // s = scale * q k^T: (rows, cols), row stride kBlockK.
    gemm(rows, cols, d, pb.scale, qb, q.rs, 1, kh + j0 * k.rs, 1, k.rs, T(0), s, kBlockK);
    for (int64_t r = 0; r < rows; ++r) {
      T* sr = s + r * kBlockK;
      const int64_t live = pb.live_cols(i0 + r, j0, cols);
      std::fill(sr + live, sr + cols, T(0));  // causally masked: probability 0
      pb.mask_row(sr, bh, i0 + r, j0, live);
      T block_max = kNegInf;
      for (int64_t c = 0; c < live; ++c) block_max = std::max(block_max, sr[c]);
      const T new_max = std::max(m[r], block_max);
      if (new_max == kNegInf) {  // nothing attended yet: this block adds nothing
        std::fill(sr, sr + live, T(0));
        continue;
      }
      for (int64_t c = 0; c < live; ++c) sr[c] -= new_max;
      exp_inplace(sr, live);
      T sum = 0;
      for (int64_t c = 0; c < live; ++c) sum += sr[c];
      // The old sum and output were relative to the old max.
      const T rescale = std::exp(m[r] - new_max);
      l[r] = l[r] * rescale + sum;
      m[r] = new_max;
      if (rescale != T(1)) {
        T* orow = ob + r * out.rs;
        for (int64_t x = 0; x < dv; ++x) orow[x] *= rescale;
      }
      if (pb.threshold > 0) {  // the sum counts every probability; the output only the kept ones
        pb.dropout_row(f, bh, i0 + r, j0, cols);
        for (int64_t c = 0; c < cols; ++c) sr[c] *= f[c];
      }
    }
    // o += p v_blk: (rows, Dv).
    gemm(rows, dv, cols, T(1), s, kBlockK, 1, vh + j0 * v.rs, v.rs, 1, T(1), ob, out.rs);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* orow = ob + r * out.rs;
    if (l[r] == T(0)) {  // attends to nothing: zeros (Note [Fused attention])
      std::fill(orow, orow + dv, T(0));
      lse[(bh * pb.tq + i0 + r)] = -std::numeric_limits<L>::infinity();
      continue;
    }
    const T inv = T(1) / l[r];
    for (int64_t x = 0; x < dv; ++x) orow[x] *= inv;
    lse[bh * pb.tq + i0 + r] = static_cast<L>(m[r] + std::log(l[r]));
  }
}

template <class T>
void attention_forward(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, const AttentionParams& params) {
  using L = T;  // the logsumexp's type: float32 for float32, float64 for float64
  const Problem<T> pb(q, k, v, mask, params);
  const int64_t qblocks = (pb.tq + kBlockQ - 1) / kBlockQ;
  const Heads<const T> qh(q), kh(k), vh(v);
  const Heads<T> oh(out);
  L* lp = logsumexp.data<L>();
  // One task is a query block against all its keys: ~4 * rows * Tk * D flops.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, 4 * kBlockQ * pb.tk * (pb.d + pb.dv)));
  parallel_for(0, pb.b * pb.h * qblocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(kBlockQ * kBlockK * 2 + kBlockQ * 2);
    T *s = scratch.data(), *f = s + kBlockQ * kBlockK, *m = f + kBlockQ * kBlockK, *l = m + kBlockQ;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / qblocks, i0 = (task % qblocks) * kBlockQ;
      forward_block(pb, bh, i0, std::min(kBlockQ, pb.tq - i0), qh, kh, vh, oh, lp, s, m, l, f);
    }
  });
}

// The gradients of one batch-head slice bh. The slices of grad_q, grad_k
// and grad_v are this call's alone.
// Each tensor's rows are Heads::rs apart (its own row stride).
template <class T>
struct BackwardArgs {
  Heads<const T> dout, q, k, v, out;
  const T* lse;  // (B * H, Tq), contiguous
  Heads<T> dq, dk, dv;
};

template <class T>
void backward_slice(const Problem<T>& pb, int64_t bh, const BackwardArgs<T>& a, T* p, T* pd, T* dp, T* f,
                    T* delta) {
  const int64_t d = pb.d, dv = pb.dv, tq = pb.tq, tk = pb.tk;
  const T* qh = a.q.row(bh, 0);        // (Tq, D)
  const T* kh = a.k.row(bh, 0);        // (Tk, D)
  const T* vh = a.v.row(bh, 0);        // (Tk, Dv)
  const T* oh = a.out.row(bh, 0);      // (Tq, Dv)
  const T* doh = a.dout.row(bh, 0);    // (Tq, Dv)
  const T* lh = a.lse + bh * tq;       // (Tq)
  T* dqh = a.dq.row(bh, 0);            // (Tq, D)
  T* dkh = a.dk.row(bh, 0);            // (Tk, D)
  T* dvh = a.dv.row(bh, 0);            // (Tk, Dv)
  const int64_t rq = a.q.rs, rk = a.k.rs, rv = a.v.rs, ro = a.out.rs, rdo = a.dout.rs;
  const int64_t rdq = a.dq.rs, rdk = a.dk.rs, rdv = a.dv.rs;
  for (int64_t i = 0; i < tq; ++i) std::fill(dqh + i * rdq, dqh + i * rdq + d, T(0));
  for (int64_t j = 0; j < tk; ++j) {
    std::fill(dkh + j * rdk, dkh + j * rdk + d, T(0));
    std::fill(dvh + j * rdv, dvh + j * rdv + dv, T(0));
  }
  const bool dropout = pb.threshold > 0;
  T* pv = dropout ? pd : p;  // the probabilities as the output used them
  for (int64_t i0 = 0; i0 < tq; i0 += kBlockQ) {
    const int64_t rows = std::min(kBlockQ, tq - i0);
    // delta_i = rowsum(dO * O) = sum_j P_ij dP_ij.
    for (int64_t r = 0; r < rows; ++r) {
      T acc = 0;
      const T *dor = doh + (i0 + r) * rdo, *orow = oh + (i0 + r) * ro;
      for (int64_t x = 0; x < dv; ++x) acc += dor[x] * orow[x];
      delta[r] = acc;
    }
    const int64_t j_end = pb.key_end(i0 + rows);
    for (int64_t j0 = 0; j0 < j_end; j0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, j_end - j0);
      // p = exp(scale * q k^T + mask - lse): (rows, cols), row stride kBlockK.
      gemm(rows, cols, d, pb.scale, qh + i0 * rq, rq, 1, kh + j0 * rk, 1, rk, T(0), p, kBlockK);
      for (int64_t r = 0; r < rows; ++r) {
        T* pr = p + r * kBlockK;
        const T row_lse = lh[i0 + r];
        if (row_lse == -std::numeric_limits<T>::infinity()) {  // attends to nothing
          std::fill(pr, pr + cols, T(0));
        } else {
          const int64_t live = pb.live_cols(i0 + r, j0, cols);
          std::fill(pr + live, pr + cols, T(0));  // causally masked: probability 0
          pb.mask_row(pr, bh, i0 + r, j0, live);
          for (int64_t c = 0; c < live; ++c) pr[c] -= row_lse;
          exp_inplace(pr, live);
        }
        if (dropout) {
          pb.dropout_row(f + r * kBlockK, bh, i0 + r, j0, cols);
          for (int64_t c = 0; c < cols; ++c) pd[r * kBlockK + c] = pr[c] * f[r * kBlockK + c];
        }
      }
      // dV_blk += pv^T dO_blk: (cols, Dv).
      gemm(cols, dv, rows, T(1), pv, 1, kBlockK, doh + i0 * rdo, rdo, 1, T(1), dvh + j0 * rdv, rdv);
      // dp = dO_blk V_blk^T: (rows, cols), the gradient of the kept probabilities.
      gemm(rows, cols, dv, T(1), doh + i0 * rdo, rdo, 1, vh + j0 * rv, 1, rv, T(0), dp, kBlockK);
      // ds = p * (dp * factor - delta), in place of dp.
      for (int64_t r = 0; r < rows; ++r) {
        T* dsr = dp + r * kBlockK;
        const T* pr = p + r * kBlockK;
        if (dropout) {
          const T* fr = f + r * kBlockK;
          for (int64_t c = 0; c < cols; ++c) dsr[c] = pr[c] * (dsr[c] * fr[c] - delta[r]);
        } else {
          for (int64_t c = 0; c < cols; ++c) dsr[c] = pr[c] * (dsr[c] - delta[r]);
        }
      }
      // dQ_blk += scale * ds K_blk: (rows, D); dK_blk += scale * ds^T Q_blk: (cols, D).
      gemm(rows, d, cols, pb.scale, dp, kBlockK, 1, kh + j0 * rk, rk, 1, T(1), dqh + i0 * rdq, rdq);
      gemm(cols, d, rows, pb.scale, dp, 1, kBlockK, qh + i0 * rq, rq, 1, T(1), dkh + j0 * rdk, rdk);
    }
  }
}

template <class T>
void attention_backward_impl(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                             const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& logsumexp, const Tensor& mask,
                             const AttentionParams& params) {
  const Problem<T> pb(q, k, v, mask, params);
  const BackwardArgs<T> args{Heads<const T>(grad_out), Heads<const T>(q), Heads<const T>(k), Heads<const T>(v),
                             Heads<const T>(out), logsumexp.data<T>(), Heads<T>(grad_q), Heads<T>(grad_k),
                             Heads<T>(grad_v)};
  parallel_for(0, pb.b * pb.h, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(kBlockQ * kBlockK * 4 + kBlockQ);
    T *p = scratch.data(), *pd = p + kBlockQ * kBlockK, *dp = pd + kBlockQ * kBlockK, *f = dp + kBlockQ * kBlockK;
    T* delta = f + kBlockQ * kBlockK;
    for (int64_t bh = begin; bh < end; ++bh) backward_slice(pb, bh, args, p, pd, dp, f, delta);
  });
}

void check_supported(const char* op, const Tensor& q, std::initializer_list<const Tensor*> heads) {
  KILN_CHECK(q.dtype() == DType::Float32 || q.dtype() == DType::Float64, op,
             ": the CPU kernel takes float32 or float64, got ", q.dtype());
  for (const Tensor* t : heads) {
    KILN_CHECK(t->dim() == 4 && (t->size(3) <= 1 || t->stride(3) == 1), op,
               ": expected (B, H, T, X) tensors with their last dim contiguous, got shape ", t->shape(),
               " and strides ", t->strides());
  }
}

}  // namespace

void CpuBackend::attention(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& mask, const AttentionParams& params) {
  check_supported("attention", q, {&out, &q, &k, &v});
  if (q.dtype() == DType::Float32) return attention_forward<float>(out, logsumexp, q, k, v, mask, params);
  attention_forward<double>(out, logsumexp, q, k, v, mask, params);
}

void CpuBackend::attention_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& logsumexp, const Tensor& mask,
                                    const AttentionParams& params) {
  check_supported("attention_backward", q, {&grad_q, &grad_k, &grad_v, &grad_out, &q, &k, &v, &out});
  if (q.dtype() == DType::Float32) {
    return attention_backward_impl<float>(grad_q, grad_k, grad_v, grad_out, q, k, v, out, logsumexp, mask, params);
  }
  attention_backward_impl<double>(grad_q, grad_k, grad_v, grad_out, q, k, v, out, logsumexp, mask, params);
}

}  // namespace kiln::cpu
