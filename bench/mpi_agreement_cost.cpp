// What an always-on agreement check would cost the MPI backend (Note
// [Always-on collective agreement]): MPI's bytes cannot carry a header, so
// the check would be a separate all-gather of each rank's 48-byte call
// before every collective. This times, on 2 ranks started by mpirun, a
// small all_reduce alone and preceded by that all-gather, interleaved in
// rounds so that both see the same machine.
//
//   mpirun --allow-run-as-root -np 2 build/bench/mpi_agreement_cost [--rounds 15] [--iterations 2000]
//
// Prints, per size, the median over rounds of the microseconds per
// all_reduce without and with the check, and their ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "distributed/collective_call.h"
#include "distributed/init.h"
#include "kiln.h"

namespace dist = kiln::distributed;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per all_reduce of `t`, with the call all-gathered first when `check`.
double time_all_reduce(dist::ProcessGroup& group, const kiln::Tensor& t, bool check, int iterations) {
  // words: this rank's call; gathered: every rank's (size x kWords).
  kiln::Tensor words = kiln::zeros({int64_t{dist::CollectiveCall::kWords}}, kiln::DType::Int64);
  kiln::Tensor gathered =
      kiln::zeros({group.size() * int64_t{dist::CollectiveCall::kWords}}, kiln::DType::Int64);
  group.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    if (check) group.all_gather_into_tensor(gathered, words)->wait();
    group.all_reduce(t)->wait();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds / iterations * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  int iterations = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atoi(argv[i + 1]);
  }
  kiln::set_num_threads(1);
  dist::init_process_group("mpi");
  dist::ProcessGroup& group = dist::default_group();
  for (int64_t bytes : {int64_t{4} << 10, int64_t{256} << 10, int64_t{4} << 20}) {
    kiln::Tensor t = kiln::ones({bytes / 4}, kiln::DType::Float32);
    const int n = static_cast<int>(iterations * (int64_t{4} << 10) / bytes + 10);
    std::vector<double> without, with;
    for (int r = 0; r < rounds; ++r) {
      without.push_back(time_all_reduce(group, t, false, n));
      with.push_back(time_all_reduce(group, t, true, n));
    }
    if (group.rank() == 0) {
      std::printf("mpi_agreement_cost bytes=%lld without_us=%.2f with_us=%.2f ratio=%.3f\n",
                  static_cast<long long>(bytes), median(without), median(with), median(with) / median(without));
    }
  }
  dist::destroy_process_group();
  return 0;
}
