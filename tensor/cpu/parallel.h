// parallel_for: splits an index range over OpenMP threads.
//
// Work smaller than `grain` items runs on the calling thread: starting a
// parallel region costs a few microseconds, more than small kernels take.
// Exceptions thrown by `fn` on any thread are caught and the first one is
// rethrown on the calling thread after the region, because an exception must
// never escape an OpenMP region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

#include "tensor/parallel.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::cpu {

// Runs fn(tid, nthreads) once on each of `nthreads` threads (on the caller
// alone when nthreads is 1 or when already inside a parallel region), and
// rethrows the first exception any of them threw.
template <class Fn>
void parallel_region(int nthreads, const Fn& fn) {
#ifdef _OPENMP
  if (nthreads > 1 && !omp_in_parallel()) {
    std::exception_ptr error;
    std::mutex error_mutex;
#pragma omp parallel num_threads(nthreads)
    {
      try {
        fn(omp_get_thread_num(), omp_get_num_threads());
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#endif
  (void)nthreads;
  fn(0, 1);
}

// Calls fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end),
// each at least `grain` long (except the last).
template <class Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  int64_t chunks = std::min<int64_t>(get_num_threads(), max_chunks);
  parallel_region(static_cast<int>(chunks), [&](int64_t tid, int64_t nthreads) {
    int64_t chunk = (n + nthreads - 1) / nthreads;
    int64_t b = begin + tid * chunk;
    int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  });
}

}  // namespace kiln::cpu
