#include "apps/common/pipeline_training.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <vector>

#include "apps/common/cli.h"
#include "autograd/grad_mode.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::apps {

namespace pp = distributed::pipeline;

namespace {

bool is_interleaved(const PipelineFlags& f) { return f.schedule == "interleaved"; }

// Whether `batch` examples split into `m` micro-batches none of which is
// empty (Note [Pipeline runtime]: ceil(B / M) each, the last smaller).
bool splits_into(int64_t batch, int64_t m) {
  if (batch < 1 || m < 1) return false;
  const int64_t chunk = (batch + m - 1) / m;
  return (m - 1) * chunk < batch;
}

std::string schedule_list() {
  std::string names;
  const auto& all = pp::schedule_names();
  for (size_t i = 0; i < all.size(); ++i) names += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
  return names;
}

}  // namespace

int virtual_stages(const PipelineFlags& f) {
  if (f.virtual_stages > 0) return static_cast<int>(f.virtual_stages);
  return is_interleaved(f) ? 2 : 1;
}

int64_t micro_batches(const PipelineFlags& f, int64_t batch_size) {
  if (f.micro_batches > 0) return f.micro_batches;
  for (int64_t m = 2 * f.pp; m >= 1; --m) {
    if (is_interleaved(f) && m % f.pp != 0) continue;
    if (splits_into(batch_size, m)) return m;
  }
  return 0;
}

void add_pipeline_flags(CLI::App& app, const PipelineFlagTargets& targets, const std::string& schedule_flag) {
  app.add_option(schedule_flag, targets.schedule,
                 "with --pp: the pipeline schedule, gpipe, 1f1b, interleaved (--virtual-stages stages per process) "
                 "or zero-bubble")
      ->capture_default_str();
  add_integer(app, "--micro-batches", targets.micro_batches,
              "with --pp: micro-batches each batch is split into (0: the most up to 2N that --batch-size splits "
              "into; with interleaved, a multiple of N)");
  add_integer(app, "--virtual-stages", targets.virtual_stages,
              "with --pp and " + schedule_flag + " interleaved: stages per process (0: 2)");
}

void check_pipeline_flags(const PipelineFlags& f, const std::string& schedule_flag, int64_t batch_size) {
  KILN_CHECK(f.pp >= 0 && f.pp <= 4096, "--pp must be from 1 to 4096 processes (0: no pipeline), got ", f.pp);
  if (f.pp == 0) {
    KILN_CHECK(f.schedule == PipelineFlags{}.schedule, schedule_flag, " only goes with --pp");
    KILN_CHECK(f.micro_batches == 0, "--micro-batches only goes with --pp");
    KILN_CHECK(f.virtual_stages == 0, "--virtual-stages only goes with --pp");
    return;
  }
  const auto& names = pp::schedule_names();
  KILN_CHECK(std::find(names.begin(), names.end(), f.schedule) != names.end(), schedule_flag,
             ": unknown pipeline schedule '", f.schedule, "' (expected ", schedule_list(), ")");
  KILN_CHECK(f.micro_batches >= 0 && f.micro_batches <= 1'000'000,
             "--micro-batches must be from 1 to 1000000 (0: the default), got ", f.micro_batches);
  KILN_CHECK(f.virtual_stages == 0 || (is_interleaved(f) && f.virtual_stages >= 2 && f.virtual_stages <= 64),
             "--virtual-stages ", f.virtual_stages,
             is_interleaved(f) ? ": the interleaved schedule takes 2 to 64 stages per process"
                               : " only goes with " + schedule_flag + " interleaved (got " + f.schedule + ")");
  const int64_t m = micro_batches(f, batch_size);
  KILN_CHECK(m > 0, "--pp ", f.pp, " ", schedule_flag, " ", f.schedule, ": a batch of ", batch_size,
             " examples (--batch-size) gives no micro-batch count up to ", 2 * f.pp,
             is_interleaved(f) ? " that is a multiple of --pp" : "", "; give --micro-batches or a larger --batch-size");
  KILN_CHECK(splits_into(batch_size, m), "--micro-batches ", m, " does not fit a batch of ", batch_size,
             " examples (--batch-size): micro-batches of ", (batch_size + m - 1) / m, " leave the last one empty");
  try {
    pp::make_schedule(f.schedule, static_cast<int>(f.pp), static_cast<int>(m), virtual_stages(f));
  } catch (const Error& e) {
    KILN_FAIL("--pp ", f.pp, " ", schedule_flag, " ", f.schedule, " --micro-batches ", m, ": ", e.message());
  }
}

pp::Schedule training_schedule(const PipelineFlags& f, int64_t batch_size) {
  return pp::make_schedule(f.schedule, static_cast<int>(f.pp), static_cast<int>(micro_batches(f, batch_size)),
                           virtual_stages(f));
}

pp::Schedule fill_drain_schedule(const pp::Schedule& training, int micro_batches) {
  KILN_CHECK(micro_batches >= 1, "fill_drain_schedule: micro_batches must be at least 1, got ", micro_batches);
  std::vector<std::vector<pp::Action>> compute(training.num_ranks);
  for (int r = 0; r < training.num_ranks; ++r) {
    const std::vector<int> stages = training.stages_of(r);
    for (int m = 0; m < micro_batches; ++m)
      for (int s : stages) compute[r].push_back({pp::ActionType::Forward, s, m});
    for (int m = micro_batches - 1; m >= 0; --m)
      for (auto s = stages.rbegin(); s != stages.rend(); ++s) compute[r].push_back({pp::ActionType::Backward, *s, m});
  }
  pp::Schedule schedule =
      pp::with_communication(training.name + " fill-drain", micro_batches, training.stage_rank, compute);
  pp::validate(schedule);
  return schedule;
}

pp::Schedule evaluation_schedule(const pp::Schedule& training) { return fill_drain_schedule(training, 1); }

int64_t micro_batches_for(int64_t batch, int64_t at_most) {
  for (int64_t m = at_most; m > 1; --m)
    if (splits_into(batch, m)) return m;
  return 1;
}

void check_pipeline_world_size(int64_t pp, int world_size, const std::string& program) {
  KILN_CHECK(world_size == pp, "--pp ", pp, " needs ", pp, " processes (kiln-run --nproc-per-node ", pp, " ", program,
             " --pp ", pp, ") but the process group has ", world_size);
}

Tensor loss_from_last_stage(const Tensor& loss, const pp::Pipeline& pipe, distributed::ProcessGroup& group) {
  Tensor shared = pipe.holds_last_stage() ? loss.detach().to(kCPU).to(DType::Float64).contiguous().clone()
                                          : zeros({}, TensorOptions(DType::Float64));
  group.broadcast(shared, pipe.schedule().stage_rank.back())->wait();
  return shared;
}

void gather_stages(const std::map<int, std::shared_ptr<nn::Module>>& mine,
                   const std::vector<std::shared_ptr<nn::Module>>& whole_stages, const pp::Schedule& schedule,
                   distributed::ProcessGroup& group) {
  KILN_CHECK(static_cast<int>(whole_stages.size()) == schedule.num_stages, "gather_stages: ", whole_stages.size(),
             " stages to gather into but the schedule has ", schedule.num_stages);
  NoGradGuard no_grad;
  for (int s = 0; s < schedule.num_stages; ++s) {
    const TensorDict into = whole_stages[s]->state_dict();
    const int owner = schedule.stage_rank[s];
    if (owner == group.rank()) {
      const TensorDict from = mine.at(s)->state_dict();
      KILN_CHECK(from.keys() == into.keys(), "gather_stages: stage ", s, "'s keys differ from the whole model's");
      for (const auto& [key, tensor] : into) {
        Tensor target = tensor;
        const Tensor& source = from.at(key);
        // `whole_stages` may be the very split the pipeline trains: nothing to copy.
        if (target.data_ptr() != source.data_ptr()) target.copy_(source);
      }
    }
    for (const auto& [key, tensor] : into) group.broadcast(tensor, owner)->wait();
  }
}

}  // namespace kiln::apps
