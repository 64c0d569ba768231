#include "tensor/cpu/parallel.h"

#include "tensor/error.h"

namespace kiln {

#ifdef _OPENMP
int get_num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}
#else
int get_num_threads() { return 1; }
void set_num_threads(int n) { KILN_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n); }
#endif

}  // namespace kiln
