// Thread count for CPU kernels.
#pragma once

namespace kiln {

// Threads CPU kernels may use (default: OpenMP's default, usually the core count).
int get_num_threads();
// Sets the thread count for CPU kernels; n >= 1.
void set_num_threads(int n);

}  // namespace kiln
