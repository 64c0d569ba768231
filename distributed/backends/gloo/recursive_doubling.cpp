#include "distributed/backends/gloo/recursive_doubling.h"

#include "tensor/factory.h"

namespace kiln::distributed::gloo_backend {

bool use_recursive_doubling(size_t bytes, int world_size) {
  return CallExchange::by_doubling(world_size) && bytes <= kRecursiveDoublingMaxBytes;
}

void recursive_doubling_all_reduce(CallExchange& exchange, void* data, size_t elements, size_t element_size,
                                   const ReduceFunction& reduce) {
  const int world_size = exchange.world_size();
  const size_t bytes = elements * element_size;
  // partial: (bytes) the steps before the last reduce here, so that `data`
  // is written only in the last step, when every rank's call is known to
  // agree. A Kiln tensor: the CPU allocator's cache hands the same pages
  // back next call instead of faulting in new ones.
  Tensor partial;
  const void* mine = data;  // this rank's reduction so far
  for (int distance = 1; distance < world_size; distance *= 2) {
    const uint8_t* theirs = exchange.step(distance, mine, bytes);
    // A disagreement: the remaining steps only pass on what this rank knows.
    if (theirs == nullptr) continue;
    const bool last = distance * 2 >= world_size;
    if (!last && !partial.defined()) partial = empty({static_cast<int64_t>(bytes)}, DType::UInt8);
    void* into = last ? data : partial.data_ptr();
    reduce(into, mine, theirs, elements);
    mine = into;
  }
  exchange.finish();
}

}  // namespace kiln::distributed::gloo_backend
