#include "distributed/ddp/training_helpers.h"

#include "tensor/factory.h"

namespace kiln::distributed {

namespace {

template <class T>
void sum_in_place(std::vector<T>& values, ProcessGroup& group) {
  if (values.empty()) return;
  Tensor t = from_vector<T>(values, {static_cast<int64_t>(values.size())}).to(group.collective_device());
  group.all_reduce(t, ReduceOp::Sum)->wait();
  t = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t.at<T>({static_cast<int64_t>(i)});
}

}  // namespace

void all_reduce_sum(std::vector<double>& values, ProcessGroup& group) { sum_in_place(values, group); }

void all_reduce_sum(std::vector<int64_t>& values, ProcessGroup& group) { sum_in_place(values, group); }

bool is_main_process(const ProcessGroup& group) { return group.rank() == 0; }

uint64_t per_rank_seed(uint64_t seed, int rank) {
  // splitmix64's finalizer over seed + rank * golden ratio: nearby seeds and
  // ranks give unrelated streams.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(rank) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool any_rank_wants(bool wanted, ProcessGroup& group) {
  Tensor flag = full({1}, wanted ? 1.0 : 0.0, {DType::Int32, group.collective_device()});
  group.all_reduce(flag, ReduceOp::Max)->wait();
  return flag.cpu().at<int32_t>({0}) != 0;
}

}  // namespace kiln::distributed
