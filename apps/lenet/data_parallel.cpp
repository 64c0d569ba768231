#include "apps/lenet/data_parallel.h"

#include "distributed/ddp/training_helpers.h"
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

// Epoch `carried.epoch` in the padded order of `carried.replicas` processes,
// split over `world_size` ranks; every other epoch as DistributedSampler
// over `world_size` (Note [Resuming on another world size]).
class CarriedEpochShard : public data::Sampler {
 public:
  CarriedEpochShard(int64_t size, int world_size, int rank, uint64_t seed, CarriedEpoch carried)
      : size_(size), world_size_(world_size), rank_(rank), seed_(seed), carried_(carried) {
    KILN_CHECK(padded_order_size(size, carried.replicas) % world_size == 0, "resuming epoch ", carried.epoch + 1,
               ": its order of ", padded_order_size(size, carried.replicas), " positions (", size,
               " images padded for ", carried.replicas, " processes) cannot be split evenly over ", world_size,
               " processes");
  }
  int64_t size() const override {
    if (epoch() != carried_.epoch) return ceil_div(size_, world_size_);
    return padded_order_size(size_, carried_.replicas) / world_size_;
  }
  std::vector<int64_t> indices() const override {
    if (epoch() != carried_.epoch) return shard(world_size_, rank_);
    // The carried order: position r + R*j is rank r's j-th of R.
    const int64_t replicas = carried_.replicas;
    std::vector<std::vector<int64_t>> shares;
    for (int64_t r = 0; r < replicas; ++r) shares.push_back(shard(replicas, r));
    std::vector<int64_t> mine;
    const int64_t total = padded_order_size(size_, replicas);
    for (int64_t k = rank_; k < total; k += world_size_) mine.push_back(shares[k % replicas][k / replicas]);
    return mine;
  }

 private:
  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  std::vector<int64_t> shard(int64_t replicas, int64_t rank) const {
    data::DistributedSampler sampler(size_, replicas, rank, /*shuffle=*/true, seed_);
    sampler.set_epoch(epoch());
    return sampler.indices();
  }

  int64_t size_;
  int world_size_;
  int rank_;
  uint64_t seed_;
  CarriedEpoch carried_;
};

}  // namespace

int64_t padded_order_size(int64_t dataset_size, int64_t replicas) {
  return (dataset_size + replicas - 1) / replicas * replicas;
}

DataParallelRun start_data_parallel(const TrainerOptions& o) {
  if (!o.ddp && !o.fsdp && o.pp == 0) return {};
  return apps::start_data_parallel(
      {.backend = o.backend, .timeout = o.timeout, .heartbeat_timeout = o.heartbeat_timeout},
      o.fsdp ? "--fsdp" : o.ddp ? "--ddp" : "--pp");
}

std::shared_ptr<data::Sampler> train_sampler(const DataParallelRun& run, int64_t dataset_size, uint64_t seed,
                                             const CarriedEpoch& carried) {
  if (carried.epoch >= 0 && carried.replicas != run.world_size) {
    return std::make_shared<CarriedEpochShard>(dataset_size, run.world_size, run.rank, seed, carried);
  }
  if (!run.group) return nullptr;
  return std::make_shared<data::DistributedSampler>(dataset_size, run.world_size, run.rank, /*shuffle=*/true, seed);
}

std::shared_ptr<data::Sampler> test_sampler(const DataParallelRun& run, int64_t dataset_size) {
  if (!run.group) return nullptr;
  return std::make_shared<StridedShard>(dataset_size, run.world_size, run.rank);
}

int64_t test_batches_per_rank(const DataParallelRun& run, int64_t dataset_size, int64_t batch_size) {
  const int64_t largest_share = (dataset_size + run.world_size - 1) / run.world_size;  // rank 0's
  return (largest_share + batch_size - 1) / batch_size;
}

Evaluation combine_evaluations(const Evaluation& local, const DataParallelRun& run) {
  if (!run.group) return local;
  // sums: the loss sum, the images, then correct and total per class; one
  // all_reduce in float64, exact for counts up to 2^53.
  std::vector<double> sums = {local.loss * static_cast<double>(local.images), static_cast<double>(local.images)};
  for (int64_t c : local.correct) sums.push_back(static_cast<double>(c));
  for (int64_t t : local.total) sums.push_back(static_cast<double>(t));
  distributed::all_reduce_sum(sums, *run.group);
  Evaluation all;
  const size_t classes = local.correct.size();
  all.images = static_cast<int64_t>(sums[1]);
  for (size_t c = 0; c < classes; ++c) {
    all.correct.push_back(static_cast<int64_t>(sums[2 + c]));
    all.total.push_back(static_cast<int64_t>(sums[2 + classes + c]));
  }
  int64_t correct = 0;
  for (int64_t c : all.correct) correct += c;
  all.loss = all.images > 0 ? sums[0] / sums[1] : 0.0;
  all.accuracy = all.images > 0 ? static_cast<double>(correct) / static_cast<double>(all.images) : 0.0;
  return all;
}

}  // namespace kiln::apps::lenet
