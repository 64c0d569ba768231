#include "distributed/pipeline/pipe.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <thread>

#include "distributed/file_store.h"
#include "distributed/init.h"
#include "tensor/error.h"

namespace kiln::distributed::pipeline {

using detail::str;

namespace {

// Floating-point tensors moved to `device` (differentiably), others as they are.
TensorList moved_to(const TensorList& tensors, const Device& device) {
  TensorList out;
  for (const Tensor& t : tensors) out.push_back(t.defined() ? t.to(device) : t);
  return out;
}

}  // namespace

// The stage threads' groups and pipelines: rank r drives the stages the
// schedule gives it (Note [Pipe: stages on threads]).
struct Pipe::Workers {
  std::filesystem::path folder;  // the store's private folder
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  std::vector<std::unique_ptr<Pipeline>> pipelines;

  ~Workers() {
    pipelines.clear();
    groups.clear();
    std::error_code ignored;
    if (!folder.empty()) std::filesystem::remove_all(folder, ignored);
  }
};

Pipe::Pipe(std::shared_ptr<nn::Sequential> model, int chunks, LossFn loss, PipeOptions options)
    : model_(std::move(model)) {
  KILN_CHECK(model_ != nullptr, "Pipe: no model");
  KILN_CHECK(options.stages_per_rank >= 1, "Pipe: stages_per_rank must be at least 1, got ", options.stages_per_rank);
  int num_stages = !options.balance.empty()   ? static_cast<int>(options.balance.size())
                   : !options.devices.empty() ? static_cast<int>(options.devices.size())
                                              : 2 * options.stages_per_rank;
  std::vector<int64_t> balance =
      options.balance.empty() ? balance_by_parameters(*model_, num_stages) : options.balance;
  devices_ = options.devices.empty() ? std::vector<Device>(num_stages, kCPU) : options.devices;
  KILN_CHECK(static_cast<int>(devices_.size()) == num_stages, "Pipe: ", devices_.size(), " devices for ", num_stages,
             " stages (give one device per stage)");
  KILN_CHECK(num_stages % options.stages_per_rank == 0, "Pipe: ", num_stages, " stages cannot be shared by ranks of ",
             options.stages_per_rank, " stages each");
  const int num_ranks = num_stages / options.stages_per_rank;
  schedule_ = make_schedule(options.schedule, num_ranks, chunks, options.stages_per_rank);
  stages_ = split_sequential(*model_, balance);

  // Each rank's stages share its device; every stage moves there.
  std::vector<Device> rank_device(num_ranks, kCPU);
  for (int s = 0; s < num_stages; ++s) {
    const int r = schedule_.stage_rank[s];
    if (s == schedule_.stages_of(r).front()) rank_device[r] = devices_[s];
    KILN_CHECK(devices_[s] == rank_device[r], "Pipe: stages ", schedule_.stages_of(r).front(), " and ", s,
               " run on the same thread (schedule '", schedule_.name, "') but are given devices ",
               rank_device[r].str(), " and ", devices_[s].str());
    stages_[s]->to(devices_[s]);
  }
  // nccl when every rank has a GPU of its own; otherwise gloo, which
  // stages CUDA tensors through the host.
  std::set<std::string> distinct;
  bool all_cuda = true;
  for (const Device& d : rank_device) {
    all_cuda = all_cuda && d.is_cuda();
    distinct.insert(d.str());
  }
  const std::string backend =
      all_cuda && static_cast<int>(distinct.size()) == num_ranks && num_ranks > 1 ? "nccl" : "gloo";

  workers_ = std::make_unique<Workers>();
  std::string pattern = (std::filesystem::temp_directory_path() / "kiln-pipe-XXXXXX").string();
  KILN_CHECK(::mkdtemp(pattern.data()) != nullptr, "Pipe: cannot make a temporary folder for its store: ",
             std::strerror(errno));
  workers_->folder = pattern;
  const std::string store_path = (workers_->folder / "store").string();
  workers_->groups.resize(num_ranks);
  std::vector<std::exception_ptr> errors(num_ranks);
  {
    // The group's rendezvous needs every rank at once: one thread each.
    std::vector<std::thread> threads;
    for (int r = 0; r < num_ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          ProcessGroupOptions group_options;
          group_options.name = "pipe";
          group_options.timeout = options.timeout;
          auto store = std::make_shared<FileStore>(store_path, num_ranks, options.timeout);
          workers_->groups[r] = make_process_group(backend, store, num_ranks, r, group_options);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  PipelineOptions pipeline_options;
  pipeline_options.checkpoint_activations = options.checkpoint_activations;
  for (int r = 0; r < num_ranks; ++r) {
    std::map<int, std::shared_ptr<nn::Module>> mine;
    for (int s : schedule_.stages_of(r)) mine[s] = stages_[s];
    workers_->pipelines.push_back(
        std::make_unique<Pipeline>(schedule_, mine, loss, workers_->groups[r], pipeline_options));
  }
}

Pipe::~Pipe() = default;

Tensor Pipe::step(const TensorList& inputs, const Tensor& target) { return run(inputs, target, true); }

Tensor Pipe::evaluate(const TensorList& inputs, const Tensor& target) { return run(inputs, target, false); }

Tensor Pipe::run(const TensorList& inputs, const Tensor& target, bool train) {
  const int num_ranks = schedule_.num_ranks;
  // Each thread's error and when it was raised: the first raised is the
  // cause, the others (peers timing out waiting for it) its consequences.
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::exception_ptr>> errors(num_ranks);
  std::vector<Tensor> losses(num_ranks);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < num_ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          Pipeline& pipeline = *workers_->pipelines[r];
          const TensorList in = pipeline.holds_first_stage() ? moved_to(inputs, devices_.front()) : TensorList{};
          const Tensor y = pipeline.holds_last_stage() && target.defined() ? target.to(devices_.back()) : Tensor();
          losses[r] = train ? pipeline.step(in, y) : pipeline.evaluate(in, y);
        } catch (...) {
          errors[r] = {std::chrono::steady_clock::now(), std::current_exception()};
        }
      });
    for (std::thread& t : threads) t.join();
  }
  const auto* first = &errors[0];
  for (const auto& e : errors)
    if (e.second && (!first->second || e.first < first->first)) first = &e;
  if (first->second) std::rethrow_exception(first->second);
  return losses[schedule_.stage_rank.back()];
}

// ---- model parallelism ----

namespace {

// The model's modules under their own names, with the input moved to each
// stage's device where the stage begins.
class DevicePlacedSequential : public nn::Sequential {
 public:
  DevicePlacedSequential(const std::vector<nn::NamedModule>& modules, std::map<size_t, Device> moves)
      : nn::Sequential(modules), moves_(std::move(moves)) {}

  TensorList forward_many(const TensorList& inputs) override {
    TensorList x = inputs;
    size_t i = 0;
    for (const auto& module : *this) {
      if (auto move = moves_.find(i); move != moves_.end()) x = moved_to(x, move->second);
      x = (*module)(x);
      ++i;
    }
    return x;
  }
  Tensor forward(const Tensor& input) override {
    TensorList out = forward_many({input});
    KILN_CHECK(out.size() == 1, "place_on_devices: the last module returned ", out.size(), " tensors");
    return out[0];
  }

 private:
  std::map<size_t, Device> moves_;  // module index -> the device its stage runs on
};

}  // namespace

std::shared_ptr<nn::Sequential> place_on_devices(const nn::Sequential& model, const std::vector<int64_t>& balance,
                                                 const std::vector<Device>& devices) {
  KILN_CHECK(balance.size() == devices.size(), "place_on_devices: ", balance.size(), " stages but ", devices.size(),
             " devices");
  const auto stages = split_sequential(model, balance);
  std::map<size_t, Device> moves;
  size_t first = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s]->to(devices[s]);
    moves.emplace(first, devices[s]);
    first += static_cast<size_t>(balance[s]);
  }
  return std::make_shared<DevicePlacedSequential>(model.named_children(), moves);
}

}  // namespace kiln::distributed::pipeline
