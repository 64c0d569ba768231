// The GEMM driver: packing, cache blocking, threading and kernel dispatch
// (Note [GEMM blocking] in gemm.h), the portable scalar micro-kernel, and the
// reference loop the tests compare against.
#include "tensor/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "tensor/cpu/parallel.h"
#include "tensor/error.h"

namespace kiln::cpu {
namespace {

// ---- the portable micro-kernel ----------------------------------------------

// An MR x NR tile in plain C++; with baseline x86-64 the compiler turns each
// row into SSE vectors. Same contract as the SIMD kernels.
template <class T, int MR, int NR>
void scalar_micro_kernel(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t rsc,
                         int64_t csc, int64_t m, int64_t n, T alpha, T beta) {
  // A packed is read as rows 1 apart, k-steps MR apart; in place, the reverse.
  const int64_t a_row = lda == 0 ? 1 : lda, a_step = lda == 0 ? MR : 1;
  T acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i * a_row] * b[j];
    }
    a += a_step;
    b += ldb;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T& out = c[i * rsc + j * csc];
      out = beta == T(0) ? alpha * acc[i][j] : alpha * acc[i][j] + beta * out;
    }
  }
}

// One kernel per shape serves packed A and A in place, told apart by lda == 0.
template <class T>
MicroKernel<T> select_scalar_kernel(int64_t rows, bool wide, bool) {
  static constexpr MicroKernel<T> kWide[] = {&scalar_micro_kernel<T, 1, 8>, &scalar_micro_kernel<T, 2, 8>,
                                             &scalar_micro_kernel<T, 3, 8>, &scalar_micro_kernel<T, 4, 8>};
  static constexpr MicroKernel<T> kNarrow[] = {&scalar_micro_kernel<T, 1, 4>, &scalar_micro_kernel<T, 2, 4>,
                                               &scalar_micro_kernel<T, 3, 4>, &scalar_micro_kernel<T, 4, 4>};
  return wide ? kWide[rows - 1] : kNarrow[rows - 1];
}

// ---- scratch memory ----------------------------------------------------------

// 64-byte aligned scratch kept per thread and grown on demand, so a small
// product does not pay for an allocation and fresh page faults on every call.
class Workspace {
 public:
  ~Workspace() { release(); }
  void* get(size_t bytes) {
    if (bytes > size_) {
      release();
      size_ = std::max(bytes, size_ * 2);
      ptr_ = ::operator new(size_, std::align_val_t(64));
    }
    return ptr_;
  }

 private:
  void release() {
    if (ptr_) ::operator delete(ptr_, std::align_val_t(64));
    ptr_ = nullptr;
    size_ = 0;
  }
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// The partial products of a K split (gemm_split_k), held by the calling thread
// across the parallel region whose threads, the caller among them, pack into
// their own thread_workspace().
Workspace& partial_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// ---- packing -------------------------------------------------------------------

// dst: (kc, m), k-major: the A sliver of rows [0, m), m <= MR. An edge sliver
// (m < MR) keeps its m rows only: the kernel chosen for it has m rows.
template <int MR, class T>
void pack_a_sliver(int64_t m, int64_t kc, const T* a, int64_t rsa, int64_t csa, T* dst) {
  if (m == MR && csa == 1) {  // row-major A: MR rows read side by side
    for (int64_t p = 0; p < kc; ++p) {
      for (int i = 0; i < MR; ++i) dst[p * MR + i] = a[i * rsa + p];
    }
    return;
  }
  if (m == MR && rsa == 1) {  // A = x.t() (a weight gradient's g.t()): each k is MR contiguous values
    for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * MR, a + p * csa, MR * sizeof(T));
    return;
  }
  if (m == MR) {
    for (int64_t p = 0; p < kc; ++p) {
      for (int i = 0; i < MR; ++i) dst[p * MR + i] = a[i * rsa + p * csa];
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < m; ++i) dst[p * m + i] = a[i * rsa + p * csa];
  }
}

// dst: (kc, NR): the B sliver of columns [0, n) (n <= NR), zero padded.
template <int NR, class T>
void pack_b_sliver(int64_t n, int64_t kc, const T* b, int64_t rsb, int64_t csb, T* dst) {
  if (n == NR && csb == 1) {  // row-major B: each k is NR contiguous values
    for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * NR, b + p * rsb, NR * sizeof(T));
    return;
  }
  if (n == NR) {  // e.g. B = w.t(): NR columns read side by side
    for (int64_t p = 0; p < kc; ++p) {
      for (int j = 0; j < NR; ++j) dst[p * NR + j] = b[p * rsb + j * csb];
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t j = 0; j < n; ++j) dst[p * NR + j] = b[p * rsb + j * csb];
    for (int64_t j = n; j < NR; ++j) dst[p * NR + j] = T(0);
  }
}

// dst: an A block of rows [0, mc) as its slivers one after another, full ones
// (kc, MR) and the last (kc, mc % MR), as pack_a_sliver lays them out. A
// transposed A (rsa == 1: a weight gradient's g.t()) holds each k's rows
// side by side, so it is copied k by k, one contiguous run of mc values at a
// time, rather than sliver by sliver, which would read MR values from each
// of kc rows far apart and stall on memory at every one.
template <int MR, class T>
void pack_a_block(int64_t mc, int64_t kc, const T* a, int64_t rsa, int64_t csa, T* dst) {
  if (rsa == 1) {
    const int64_t full = mc / MR * MR, tail = mc - full;
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = a + p * csa;
      for (int64_t ir = 0; ir < full; ir += MR) std::memcpy(dst + ir * kc + p * MR, src + ir, MR * sizeof(T));
      for (int64_t i = 0; i < tail; ++i) dst[full * kc + p * tail + i] = src[full + i];
    }
    return;
  }
  for (int64_t ir = 0; ir < mc; ir += MR) {
    pack_a_sliver<MR>(std::min<int64_t>(MR, mc - ir), kc, a + ir * rsa, rsa, csa, dst + ir * kc);
  }
}

// The packers are specialised on the tile so their inner loops unroll; the
// tiles in use are the ones gemm_kernel_*() return. One sliver is a block of
// mc <= MR rows.
template <class T>
void pack_a_block(int64_t mr, int64_t mc, int64_t kc, const T* a, int64_t rsa, int64_t csa, T* dst) {
  switch (mr) {
    case 4: return pack_a_block<4>(mc, kc, a, rsa, csa, dst);
    case 6: return pack_a_block<6>(mc, kc, a, rsa, csa, dst);
    case 12: return pack_a_block<12>(mc, kc, a, rsa, csa, dst);
  }
  KILN_FAIL("gemm: no A packer for a tile of ", mr, " rows");
}

template <class T>
void pack_b(const GemmKernel<T>& kern, int64_t n, int64_t kc, const T* b, int64_t rsb, int64_t csb, T* dst) {
  if (n == kern.nr && rsb == 1 && kern.pack_b_columns) return kern.pack_b_columns(kern.nr, kc, b, csb, dst);
  switch (kern.nr) {
    case 8: return pack_b_sliver<8>(n, kc, b, rsb, csb, dst);
    case 16: return pack_b_sliver<16>(n, kc, b, rsb, csb, dst);
    case 32: return pack_b_sliver<32>(n, kc, b, rsb, csb, dst);
  }
  KILN_FAIL("gemm: no B packer for a tile of ", kern.nr, " columns");
}

// dst: a B panel of columns [0, nc) as its slivers one after another,
// (kc, NR) each, the last zero padded (pack_b_sliver's layout). A row-major B
// (csb == 1: the activations of a weight gradient g.t() @ x) is copied k by k,
// one contiguous run of nc values at a time, for the reason pack_a_block
// gives; other layouts go sliver by sliver.
template <int NR, class T>
void pack_b_panel_rows(int64_t nc, int64_t kc, const T* b, int64_t rsb, T* dst) {
  const int64_t full = nc / NR * NR, tail = nc - full;
  for (int64_t p = 0; p < kc; ++p) {
    const T* src = b + p * rsb;
    for (int64_t j = 0; j < full; j += NR) std::memcpy(dst + j * kc + p * NR, src + j, NR * sizeof(T));
    if (tail == 0) continue;
    T* edge = dst + full * kc + p * NR;
    for (int64_t j = 0; j < tail; ++j) edge[j] = src[full + j];
    for (int64_t j = tail; j < NR; ++j) edge[j] = T(0);
  }
}

template <class T>
void pack_b_panel(const GemmKernel<T>& kern, int64_t nc, int64_t kc, const T* b, int64_t rsb, int64_t csb, T* dst) {
  if (csb == 1) {
    switch (kern.nr) {
      case 8: return pack_b_panel_rows<8>(nc, kc, b, rsb, dst);
      case 16: return pack_b_panel_rows<16>(nc, kc, b, rsb, dst);
      case 32: return pack_b_panel_rows<32>(nc, kc, b, rsb, dst);
    }
  }
  for (int64_t j = 0; j < nc; j += kern.nr) pack_b(kern, std::min(kern.nr, nc - j), kc, b + j * csb, rsb, csb, dst + j * kc);
}

// ---- threading -----------------------------------------------------------------

// Below this many FLOPs per thread (~25 us of work) a second thread costs more
// (waking it, its cold cache, repacking) than it saves.
constexpr int64_t kFlopsPerThread = int64_t{1} << 21;

int threads_for(double flops, int max_threads) {
  double wanted = flops / static_cast<double>(kFlopsPerThread);
  return static_cast<int>(std::clamp(wanted, 1.0, static_cast<double>(std::max(1, max_threads))));
}

// ---- the two routes ------------------------------------------------------------

// C = beta * C, for K == 0 or alpha == 0 (beta == 0 writes zeros, reading nothing).
template <class T>
void scale_c(const GemmArgs<T>& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      T& out = g.c[i * g.rsc + j * g.csc];
      out = g.beta == T(0) ? T(0) : g.beta * out;
    }
  }
}

// B read in place (csb == 1, M small): A is packed once, whole, unless it is
// row-major and read in place too (K is not blocked: a B sliver K x NR is
// reused only by the few A slivers, which meet it while it is still in L1/L2).
// Threads split the slivers of B.
template <class T>
void gemm_direct_b(const GemmArgs<T>& g, const GemmKernel<T>& kern, int nthreads) {
  const int64_t mr = kern.mr, nr = kern.nr, k = g.k;
  const int64_t mslivers = (g.m + mr - 1) / mr, nslivers = (g.n + nr - 1) / nr;
  const int64_t full_slivers = g.n / nr;
  const bool packed_a = g.csa != 1;
  // apack: (mslivers, K, MR) when packed_a; btail: (K, NR), the last, partial B sliver.
  const int64_t apack_size = packed_a ? mslivers * mr * k : 0;
  T* apack = static_cast<T*>(thread_workspace().get(sizeof(T) * (apack_size + k * nr)));
  T* btail = apack + apack_size;
  for (int64_t r = 0; packed_a && r < mslivers; ++r) {
    pack_a_block(mr, std::min(mr, g.m - r * mr), k, g.a + r * mr * g.rsa, g.rsa, g.csa, apack + r * mr * k);
  }
  if (full_slivers < nslivers) {
    pack_b(kern, g.n - full_slivers * nr, k, g.b + full_slivers * nr, g.rsb, g.csb, btail);
  }
  parallel_region(nthreads, [&](int tid, int nt) {
    for (int64_t s = nslivers * tid / nt; s < nslivers * (tid + 1) / nt; ++s) {
      const bool full = s < full_slivers;
      const T* bs = full ? g.b + s * nr : btail;
      const int64_t ldb = full ? g.rsb : nr, n = std::min(nr, g.n - s * nr);
      for (int64_t r = 0; r < mslivers; ++r) {
        const int64_t m = std::min(mr, g.m - r * mr);
        const T* a = packed_a ? apack + r * mr * k : g.a + r * mr * g.rsa;
        T* c = g.c + r * mr * g.rsc + s * nr * g.csc;
        kern.select(m, 2 * n > nr, packed_a)(k, a, packed_a ? 0 : g.rsa, bs, ldb, c, g.rsc, g.csc, m, n, g.alpha,
                                             g.beta);
      }
    }
  });
}

// Up to this many columns of C, a row-major A is read in place, not packed.
constexpr int64_t kInPlaceAMaxN = 256;

// The blocked GotoBLAS loops on one thread: B packed, A packed or (small N)
// read in place.
template <class T>
void gemm_blocked(const GemmArgs<T>& g, const GemmKernel<T>& kern) {
  const int64_t mr = kern.mr, nr = kern.nr;
  // A row-major and few B slivers to reuse a packed A block: packing it would
  // cost more than reading its rows in place.
  const bool packed_a = !(g.csa == 1 && g.n <= kInPlaceAMaxN);
  const int64_t kc_max = std::min(kern.kc, g.k);
  const int64_t nc_max = std::min(kern.nc, round_up(g.n, nr));
  const int64_t mc_max = std::min(kern.mc, round_up(g.m, mr));
  // bpanel: (nc / NR, KC, NR); apanel: (mc / MR, KC, MR).
  const int64_t bpanel_size = round_up(nc_max * kc_max, 16), apanel_size = packed_a ? mc_max * kc_max : 0;
  T* bpanel = static_cast<T*>(thread_workspace().get(sizeof(T) * (bpanel_size + apanel_size)));
  T* apanel = bpanel + bpanel_size;

  for (int64_t jc = 0; jc < g.n; jc += kern.nc) {
    const int64_t nc = std::min(kern.nc, g.n - jc);
    const int64_t nslivers = (nc + nr - 1) / nr;
    for (int64_t pc = 0; pc < g.k; pc += kern.kc) {
      const int64_t kc = std::min(kern.kc, g.k - pc);
      // Later K blocks add to what the first one wrote.
      const T beta = pc == 0 ? g.beta : T(1);
      pack_b_panel(kern, nc, kc, g.b + pc * g.rsb + jc * g.csb, g.rsb, g.csb, bpanel);
      for (int64_t ic = 0; ic < g.m; ic += kern.mc) {
        const int64_t mc = std::min(kern.mc, g.m - ic);
        const T* a_block = g.a + ic * g.rsa + pc * g.csa;
        if (packed_a) pack_a_block(mr, mc, kc, a_block, g.rsa, g.csa, apanel);
        for (int64_t s = 0; s < nslivers; ++s) {
          const int64_t n = std::min(nr, nc - s * nr);
          T* c = g.c + ic * g.rsc + (jc + s * nr) * g.csc;
          const MicroKernel<T> full = kern.select(mr, 2 * n > nr, packed_a);
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int64_t m = std::min(mr, mc - ir);
            const T* a = packed_a ? apanel + ir * kc : a_block + ir * g.rsa;
            (m == mr ? full : kern.select(m, 2 * n > nr, packed_a))(kc, a, packed_a ? 0 : g.rsa,
                                                                     bpanel + s * nr * kc, nr, c + ir * g.rsc,
                                                                     g.rsc, g.csc, m, n, g.alpha, beta);
          }
        }
      }
    }
  }
}

// Threads take disjoint parts of C and run the blocked loops independently,
// each packing its own panels: no barriers, so a thread that loses its core
// on a busy machine delays only the end, not every K block. Splitting columns
// repacks A once per thread, splitting rows B: the split repacks the smaller.
template <class T>
void gemm_packed(const GemmArgs<T>& g, const GemmKernel<T>& kern, int nthreads) {
  const bool split_rows = g.m > g.n;
  const int64_t tile = split_rows ? kern.mr : kern.nr, extent = split_rows ? g.m : g.n;
  const int64_t tiles = (extent + tile - 1) / tile;
  parallel_region(static_cast<int>(std::min<int64_t>(nthreads, tiles)), [&](int tid, int nt) {
    const int64_t begin = tiles * tid / nt * tile, end = std::min(extent, tiles * (tid + 1) / nt * tile);
    if (begin >= end) return;
    GemmArgs<T> part = g;
    if (split_rows) {
      part.m = end - begin;
      part.a += begin * g.rsa;
      part.c += begin * g.rsc;
    } else {
      part.n = end - begin;
      part.b += begin * g.csb;
      part.c += begin * g.csc;
    }
    gemm_blocked(part, kern);
  });
}

// A product at least this many times longer in K than in M and N is split
// along K (gemm_split_k).
constexpr int64_t kSplitKRatio = 4;

// Whether threads should split K rather than rows or columns: a long K
// against a small C, as in a linear layer's weight gradient g.t() @ x
// (M, N: its features; K: every token of the batch). Splitting rows has every
// thread pack all of B (K x N), splitting columns all of A (K x M), while
// partial sums over K ranges pack each operand once and cost only M x N
// additions per extra thread at the end. Each thread gets at least one full
// K block.
template <class T>
bool split_k_pays(const GemmArgs<T>& g, const GemmKernel<T>& kern, int nthreads) {
  return nthreads > 1 && g.k >= kSplitKRatio * std::max(g.m, g.n) && g.k >= nthreads * kern.kc;
}

// Threads take disjoint K ranges: the first accumulates its part into C
// (with beta), each other one writes its part to a scratch C, and the scratch
// Cs are added to C at the end in thread order, so the result does not
// depend on timing.
template <class T>
void gemm_split_k(const GemmArgs<T>& g, const GemmKernel<T>& kern, int nthreads) {
  const int64_t mn = g.m * g.n;
  // partials: (nthreads - 1, M, N) row-major; partial t - 1 is thread t's sum.
  T* partials = static_cast<T*>(partial_workspace().get(sizeof(T) * static_cast<size_t>((nthreads - 1) * mn)));
  int used = 1;  // threads the region really ran (one when nested in another region)
  parallel_region(nthreads, [&](int tid, int nt) {
    if (tid == 0) used = nt;
    // K ranges in whole KC blocks but the last, so no thread runs two partial blocks.
    const int64_t blocks = (g.k + kern.kc - 1) / kern.kc;
    const int64_t begin = std::min(g.k, blocks * tid / nt * kern.kc);
    const int64_t end = std::min(g.k, blocks * (tid + 1) / nt * kern.kc);
    GemmArgs<T> part = g;
    part.k = end - begin;
    part.a += begin * g.csa;
    part.b += begin * g.rsb;
    if (tid > 0) {
      part.c = partials + (tid - 1) * mn;
      part.rsc = g.n;
      part.csc = 1;
      part.beta = T(0);
      if (part.k == 0) return std::fill(part.c, part.c + mn, T(0));
    } else if (part.k == 0) {
      return scale_c(part);
    }
    gemm_blocked(part, kern);
  });
  // C += partials, rows shared out.
  parallel_region(used, [&](int tid, int nt) {
    for (int64_t i = g.m * tid / nt; i < g.m * (tid + 1) / nt; ++i) {
      T* c = g.c + i * g.rsc;
      for (int t = 1; t < used; ++t) {
        const T* p = partials + (t - 1) * mn + i * g.n;
        for (int64_t j = 0; j < g.n; ++j) c[j * g.csc] += p[j];
      }
    }
  });
}

// Up to this many tiles of rows, B is read in place rather than packed.
constexpr int64_t kDirectMaxRowTiles = 3;

// One product (g.batch is ignored) on up to `nthreads` threads.
template <class T>
void gemm_one(GemmArgs<T> g, const GemmKernel<T>& kern, int nthreads) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0 || g.alpha == T(0)) return scale_c(g);
  // The kernels write rows of C; a column-major C is the row-major C^T = B^T A^T.
  if (g.csc != 1 && g.rsc == 1) {
    std::swap(g.m, g.n);
    std::swap(g.a, g.b);
    std::swap(g.rsa, g.csb);
    std::swap(g.csa, g.rsb);
    std::swap(g.rsc, g.csc);
  }
  if (g.csb == 1 && g.m <= kDirectMaxRowTiles * kern.mr) return gemm_direct_b(g, kern, nthreads);
  if (split_k_pays(g, kern, nthreads)) return gemm_split_k(g, kern, nthreads);
  gemm_packed(g, kern, nthreads);
}

template <class T>
GemmKernel<T> kernel_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return gemm_kernel_avx512<T>();
    case SimdLevel::Avx2: return gemm_kernel_avx2<T>();
    case SimdLevel::Scalar: break;
  }
  return gemm_kernel_scalar<T>();
}

}  // namespace

template <class T>
GemmKernel<T> gemm_kernel_scalar() {
  return {&select_scalar_kernel<T>, nullptr, 4, 8, 64, 256, 2048};
}

template <class T>
void gemm_at_level(const GemmArgs<T>& args, SimdLevel level, int max_threads) {
  KILN_CHECK(args.batch >= 0 && args.m >= 0 && args.n >= 0 && args.k >= 0, "gemm: negative size: batch ",
             args.batch, ", m ", args.m, ", n ", args.n, ", k ", args.k);
  if (args.batch == 0 || args.m == 0 || args.n == 0) return;
  const GemmKernel<T> kern = kernel_for<T>(level);
  const double flops = 2.0 * static_cast<double>(args.m) * static_cast<double>(args.n) * static_cast<double>(args.k);
  const int per_product = threads_for(flops, max_threads);
  const int whole_batch = threads_for(flops * static_cast<double>(args.batch), max_threads);
  auto product = [&](int64_t i) {
    GemmArgs<T> g = args;
    g.a += i * args.bsa;
    g.b += i * args.bsb;
    g.c += i * args.bsc;
    return g;
  };
  if (args.batch == 1 || per_product >= whole_batch) {
    for (int64_t i = 0; i < args.batch; ++i) gemm_one(product(i), kern, per_product);
    return;
  }
  // Products too small to share out: one thread each.
  parallel_region(whole_batch, [&](int tid, int nt) {
    for (int64_t i = args.batch * tid / nt; i < args.batch * (tid + 1) / nt; ++i) gemm_one(product(i), kern, 1);
  });
}

template <class T>
void gemm_reference(const GemmArgs<T>& g) {
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    const T* a = g.a + bi * g.bsa;
    const T* b = g.b + bi * g.bsb;
    T* c = g.c + bi * g.bsc;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < g.k; ++p) sum += double(a[i * g.rsa + p * g.csa]) * double(b[p * g.rsb + j * g.csb]);
        T& out = c[i * g.rsc + j * g.csc];
        out = g.beta == T(0) ? T(g.alpha * sum) : T(g.alpha * sum + g.beta * double(out));
      }
    }
  }
}

template GemmKernel<float> gemm_kernel_scalar<float>();
template GemmKernel<double> gemm_kernel_scalar<double>();
template void gemm_at_level<float>(const GemmArgs<float>&, SimdLevel, int);
template void gemm_at_level<double>(const GemmArgs<double>&, SimdLevel, int);
template void gemm_reference<float>(const GemmArgs<float>&);
template void gemm_reference<double>(const GemmArgs<double>&);

void sgemm_batched(const GemmArgs<float>& args) { gemm_at_level(args, simd_level(), get_num_threads()); }
void dgemm_batched(const GemmArgs<double>& args) { gemm_at_level(args, simd_level(), get_num_threads()); }

void sgemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t rsa, int64_t csa, const float* B,
           int64_t rsb, int64_t csb, float beta, float* C, int64_t rsc, int64_t csc) {
  sgemm_batched({1, M, N, K, alpha, beta, A, 0, rsa, csa, B, 0, rsb, csb, C, 0, rsc, csc});
}

void dgemm(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t rsa, int64_t csa,
           const double* B, int64_t rsb, int64_t csb, double beta, double* C, int64_t rsc, int64_t csc) {
  dgemm_batched({1, M, N, K, alpha, beta, A, 0, rsa, csa, B, 0, rsb, csb, C, 0, rsc, csc});
}

}  // namespace kiln::cpu
