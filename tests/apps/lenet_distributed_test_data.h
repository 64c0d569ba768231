// Shared by the tests of kiln-lenet across processes (lenet_ddp_test.cpp,
// lenet_fsdp_test.cpp): the synthetic data set written once for every rank,
// a run with its printed output, the largest weight difference, and a
// checkpoint read back.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "apps/lenet/trainer.h"
#include "distributed/file_store.h"
#include "distributed/multi_process.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet::testing {

// The synthetic CIFAR-10 folder, written once by rank 0 for both ranks.
inline std::string shared_data(int rank) {
  using distributed::testing::test_store_dir;
  const std::string root = test_store_dir() + "/data";
  distributed::FileStore meeting(test_store_dir() + "/meeting", -1, std::chrono::seconds(20));
  if (rank == 0) {
    write_synthetic_cifar(root);
    meeting.set("data written", std::string("1"));
  }
  meeting.wait({"data written"});
  return root;
}

// A run and what it printed.
struct Trained {
  TrainingResult result;
  std::string out;
};

inline Trained train(const TrainerOptions& o, std::function<bool(int64_t)> should_stop = {}) {
  std::ostringstream out, err;
  TrainerHooks hooks;
  hooks.out = &out;
  hooks.err = &err;  // 4 processes on 2 cores are warned about
  hooks.should_stop = std::move(should_stop);
  TrainingResult r = run_training(o, hooks);
  return {std::move(r), out.str()};
}

// max |a - b| over the parameters of two modules of the same architecture.
inline double max_difference(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    EXPECT_EQ(pa[i].shape(), pb[i].shape());
    worst = std::max(worst, max(abs(pa[i] - pb[i])).item<double>());
  }
  return worst;
}

// Weights, optimizer state and history from a kiln-lenet checkpoint.
struct Checkpointed {
  nn::LeNet model;
  std::vector<EpochRecord> history;
  TensorDict tensors;
  explicit Checkpointed(const std::string& path) {
    std::map<std::string, std::string> metadata;
    tensors = load_safetensors(path, &metadata);
    TensorDict weights;
    for (const auto& [name, t] : tensors) {
      if (name.starts_with("model.")) weights.insert(name.substr(6), t);
    }
    model.load_state_dict(weights);
    history = history_from_json(metadata.at("extra.history"));
  }
};

}  // namespace kiln::apps::lenet::testing
