#include "apps/lenet/data_parallel.h"

#include "distributed/ddp/training_helpers.h"
#include "distributed/init.h"
#include "tensor/error.h"

namespace kiln::apps::lenet {

namespace {

// Rank r of N takes indices r, r + N, ... < size: no padding, so every test
// image is counted exactly once over the ranks.
class StridedShard : public data::Sampler {
 public:
  StridedShard(int64_t size, int world_size, int rank) : size_(size), world_size_(world_size), rank_(rank) {}
  int64_t size() const override { return rank_ < size_ ? (size_ - rank_ + world_size_ - 1) / world_size_ : 0; }
  std::vector<int64_t> indices() const override {
    std::vector<int64_t> out;
    for (int64_t i = rank_; i < size_; i += world_size_) out.push_back(i);
    return out;
  }

 private:
  int64_t size_;
  int world_size_;
  int rank_;
};

}  // namespace

DataParallelRun start_data_parallel(const TrainerOptions& o) {
  DataParallelRun run;
  if (!o.ddp) return run;
  if (!distributed::is_initialized()) {
    distributed::init_process_group(o.backend);
    run.initialized_here = true;
  }
  run.group = distributed::default_group_ptr();
  KILN_CHECK(run.group->backend_name() == o.backend, "--ddp: the default process group uses ",
             run.group->backend_name(), " but --backend is ", o.backend);
  run.rank = run.group->rank();
  run.world_size = run.group->size();
  return run;
}

void finish_data_parallel(DataParallelRun& run) {
  if (run.initialized_here) distributed::destroy_process_group();
  run.group.reset();
}

std::shared_ptr<data::Sampler> train_sampler(const DataParallelRun& run, int64_t dataset_size, uint64_t seed) {
  if (!run.group) return nullptr;
  return std::make_shared<data::DistributedSampler>(dataset_size, run.world_size, run.rank, /*shuffle=*/true, seed);
}

std::shared_ptr<data::Sampler> test_sampler(const DataParallelRun& run, int64_t dataset_size) {
  if (!run.group) return nullptr;
  return std::make_shared<StridedShard>(dataset_size, run.world_size, run.rank);
}

Evaluation combine_evaluations(const Evaluation& local, const DataParallelRun& run) {
  if (!run.group) return local;
  // counts: images, then correct and total per class
  std::vector<int64_t> counts = {local.images};
  counts.insert(counts.end(), local.correct.begin(), local.correct.end());
  counts.insert(counts.end(), local.total.begin(), local.total.end());
  distributed::all_reduce_sum(counts, *run.group);
  std::vector<double> loss_sum = {local.loss * static_cast<double>(local.images)};
  distributed::all_reduce_sum(loss_sum, *run.group);
  Evaluation all;
  const size_t classes = local.correct.size();
  all.images = counts[0];
  all.correct.assign(counts.begin() + 1, counts.begin() + 1 + static_cast<ptrdiff_t>(classes));
  all.total.assign(counts.begin() + 1 + static_cast<ptrdiff_t>(classes), counts.end());
  int64_t correct = 0;
  for (int64_t c : all.correct) correct += c;
  all.loss = all.images > 0 ? loss_sum[0] / static_cast<double>(all.images) : 0.0;
  all.accuracy = all.images > 0 ? static_cast<double>(correct) / static_cast<double>(all.images) : 0.0;
  return all;
}

}  // namespace kiln::apps::lenet
