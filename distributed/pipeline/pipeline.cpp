#include "distributed/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace kiln::distributed::pipeline {

using detail::str;

namespace {

// Each kind of message has its own tag (Note [Pipeline runtime]).
constexpr int kTagActivations = 7101;  // handshakes and activations, stage s -> s+1
constexpr int kTagGrads = 7102;        // gradients of inputs, stage s -> s-1
constexpr int kTagTied = 7103;         // tied parameters' gradients

using Signature = std::vector<std::pair<DType, Shape>>;

Signature signature_of(const TensorList& tensors) {
  Signature s;
  for (const Tensor& t : tensors) s.emplace_back(t.dtype(), t.shape());
  return s;
}

std::string describe(const Signature& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i)
    out += str(i ? ", " : "", dtype_name(s[i].first), " ", s[i].second);
  return "[" + out + "]";
}

// Signature <-> int64 words: count, then per tensor dtype, ndim, sizes.
Tensor encode(const Signature& s) {
  std::vector<int64_t> words = {static_cast<int64_t>(s.size())};
  for (const auto& [dtype, shape] : s) {
    words.push_back(static_cast<int64_t>(dtype));
    words.push_back(static_cast<int64_t>(shape.size()));
    words.insert(words.end(), shape.begin(), shape.end());
  }
  Tensor t = empty({static_cast<int64_t>(words.size())}, TensorOptions(DType::Int64));
  std::copy(words.begin(), words.end(), t.data<int64_t>());
  return t;
}

Signature decode(const Tensor& t) {
  const int64_t* w = t.data<int64_t>();
  const int64_t n = t.numel();
  Signature s;
  int64_t at = 1;
  for (int64_t i = 0; i < w[0]; ++i) {
    KILN_CHECK(at + 2 <= n && at + 2 + w[at + 1] <= n, "pipeline: a malformed shape handshake");
    const DType dtype = static_cast<DType>(w[at]);
    const Shape shape(w + at + 2, w + at + 2 + w[at + 1]);
    s.emplace_back(dtype, shape);
    at += 2 + w[at + 1];
  }
  return s;
}

// The device a stage's parameters live on (the CPU for a stage without any).
Device device_of(const nn::Module& module) {
  for (const Tensor& p : module.parameters()) return p.device();
  return kCPU;
}

// Buffers of `signature` on `device`, each with its receive from `src`
// posted (ProcessGroup::irecv): what RECV_F and RECV_B wait for.
using Posted = std::vector<std::pair<Tensor, WorkPtr>>;
Posted post_receive(ProcessGroup& group, const Signature& signature, const Device& device, int src, int tag) {
  Posted posted;
  for (const auto& [dtype, shape] : signature) {
    Tensor buffer = empty(shape, TensorOptions(dtype, device));
    posted.emplace_back(buffer, group.irecv(buffer, src, tag));
  }
  return posted;
}

// The gradients a stage receives for its outputs: of the floating-point ones.
Signature floating_only(const Signature& signature) {
  Signature floating;
  for (const auto& entry : signature)
    if (is_floating(entry.first)) floating.push_back(entry);
  return floating;
}

// x.detach() as a leaf that requires grad when floating point and `train`:
// where a stage's graph begins.
Tensor stage_input(const Tensor& x, bool train) {
  Tensor leaf = x.detach();
  if (train && is_floating(leaf.dtype())) leaf.requires_grad_();
  return leaf;
}

}  // namespace

// ---- one step ----

struct Pipeline::MicroBatchState {
  TensorList inputs;        // leaves where received or handed over
  TensorList outputs;       // the stage's outputs (what SEND_F sends)
  Tensor loss;              // last stage: the micro-batch's loss scaled by b_i / B
  TensorList output_grads;  // per output: its gradient (undefined for non-floating outputs)
  TensorList input_grads;   // per input: its gradient (undefined where none)
  autograd::DeferredBackward rest;  // what I left for W (Note [Split backward])
  bool split = false;              // I ran backward_input: W runs the rest
  bool backward_done = false;      // B or W has run: the graph is freed
  bool input_grads_passed = false; // sent, handed over, or none to pass (stage 0)
};

struct Pipeline::Run {
  bool train = true;
  std::vector<int64_t> sizes;             // micro-batch sizes
  int64_t batch = 0;                      // their sum
  std::vector<TensorList> first_inputs;   // per micro-batch, on stage 0's rank
  std::vector<Tensor> targets;            // per micro-batch, on the last stage's rank
  std::map<std::pair<int, int>, MicroBatchState> states;  // (stage, micro-batch)
  std::vector<WorkPtr> sends;
  Tensor loss_sum;
  bool completes_gradients = false;  // the action running is its stage's last B or W
  size_t action_index = 0;           // of the action running, in this rank's list
  // Receives posted when the step began (Note [Pipeline runtime]): per
  // action index, its buffers and their Works.
  std::map<size_t, Posted> posted;
};

Pipeline::Pipeline(Schedule schedule, std::map<int, std::shared_ptr<nn::Module>> stages, LossFn loss,
                   std::shared_ptr<ProcessGroup> group, PipelineOptions options)
    : schedule_(std::move(schedule)),
      stages_(std::move(stages)),
      loss_(std::move(loss)),
      group_(std::move(group)),
      options_(std::move(options)) {
  KILN_CHECK(group_ != nullptr, "Pipeline: no process group");
  KILN_CHECK(loss_ != nullptr, "Pipeline: no loss function");
  rank_ = group_->rank();
  validate(schedule_);
  KILN_CHECK(schedule_.num_ranks == group_->size(), "Pipeline: schedule '", schedule_.name, "' is for ",
             schedule_.num_ranks, " ranks but the process group has ", group_->size());
  const std::vector<int> mine = schedule_.stages_of(rank_);
  for (int s : mine)
    KILN_CHECK(stages_.count(s) && stages_.at(s) != nullptr, "Pipeline: rank ", rank_, " runs stage ", s,
               " in schedule '", schedule_.name, "' but was given no module for it");
  for (const auto& [s, module] : stages_)
    KILN_CHECK(std::find(mine.begin(), mine.end(), s) != mine.end(), "Pipeline: rank ", rank_,
               " was given a module for stage ", s, ", which schedule '", schedule_.name, "' runs on rank ",
               s >= 0 && s < schedule_.num_stages ? std::to_string(schedule_.stage_rank[s]) : "none");
  for (const Action& a : schedule_.ranks[rank_])
    KILN_CHECK(a.type != ActionType::BackwardInput ||
                   dynamic_cast<fsdp::FullyShardedDataParallel*>(stages_.at(a.stage).get()) == nullptr,
               "Pipeline: stage ", a.stage, " is a FullyShardedDataParallel, whose backward cannot be split into I and",
               " W (schedule '", schedule_.name, "'); use gpipe, 1f1b or interleaved");
  // The action after which each stage's gradients are complete: a
  // DistributedDataParallel stage reduces in it.
  const std::vector<Action>& actions = schedule_.ranks[rank_];
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].type == ActionType::Backward || actions[i].type == ActionType::BackwardWeight)
      last_gradient_action_[actions[i].stage] = i;
  for (const TiedParameter& tied : options_.tied) {
    KILN_CHECK(tied.size() >= 2, "Pipeline: a tied parameter needs at least two holders, got ", tied.size());
    for (const auto& [s, key] : tied) {
      KILN_CHECK(s >= 0 && s < schedule_.num_stages, "Pipeline: tied parameter '", key, "' names stage ", s,
                 " outside 0..", schedule_.num_stages - 1);
      if (stages_.count(s))
        KILN_CHECK(stages_.at(s)->named_parameters().contains(key), "Pipeline: stage ", s,
                   " has no parameter '", key, "' to tie");
    }
  }
}

Tensor Pipeline::step(const TensorList& inputs, const Tensor& target) { return run(inputs, target, true); }

Tensor Pipeline::evaluate(const TensorList& inputs, const Tensor& target) {
  NoGradGuard no_grad;
  return run(inputs, target, false);
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct MeanSeconds {
  double sum = 0;
  int count = 0;
  void add(double seconds) {
    sum += seconds;
    ++count;
  }
  double mean() const { return count > 0 ? sum / count : 0.0; }
};
}  // namespace

Tensor Pipeline::run(const TensorList& inputs, const Tensor& target, bool train) {
  const auto step_start = Clock::now();
  times_ = StepTimes{};
  const int M = schedule_.num_micro_batches;
  Run run;
  run.train = train;
  std::map<std::pair<int, ActionType>, MeanSeconds> action_seconds;  // (stage, type) of the compute actions
  // The micro-batch sizes go from stage 0's rank to every rank.
  // A batch stage 0's rank cannot split is announced as -1 so that every
  // rank fails at once instead of waiting for micro-batches that never come.
  Tensor sizes = zeros({M}, TensorOptions(DType::Int64));
  std::string split_error;
  if (holds_first_stage()) {
    const int64_t B = !inputs.empty() && inputs[0].defined() && inputs[0].dim() > 0 ? inputs[0].size(0) : 0;
    const int64_t chunk = (B + M - 1) / M;
    if (inputs.empty()) split_error = str("Pipeline::step: rank ", rank_, " runs stage 0 and needs its inputs");
    for (size_t i = 0; i < inputs.size() && split_error.empty(); ++i)
      if (!inputs[i].defined() || inputs[i].dim() == 0 || inputs[i].size(0) != B)
        split_error = str("Pipeline::step: input ", i, " has shape ",
                          inputs[i].defined() ? str(inputs[i].shape()) : std::string("(undefined)"), " but input 0 has ",
                          B, " examples (inputs are split along dim 0)");
    if (split_error.empty() && !(B >= 1 && (M - 1) * chunk < B))
      split_error = str("Pipeline::step: a batch of ", B, " examples cannot be split into ", M,
                        " micro-batches (micro-batches of ", chunk, " leave the last one empty)");
    if (split_error.empty()) {
      for (int m = 0; m < M; ++m) sizes.data<int64_t>()[m] = std::min(chunk, B - m * chunk);
    } else {
      sizes.data<int64_t>()[0] = -1;
    }
  }
  group_->broadcast(sizes, schedule_.stage_rank.front())->wait();
  if (!split_error.empty()) KILN_FAIL(split_error);
  KILN_CHECK(sizes.data<int64_t>()[0] > 0, "Pipeline::step: stage 0's rank could not split its batch into ", M,
             " micro-batches; see its error");
  for (int m = 0; m < M; ++m) {
    run.sizes.push_back(sizes.data<int64_t>()[m]);
    run.batch += run.sizes.back();
  }
  int64_t start = 0;
  for (int m = 0; m < M; ++m) {
    if (holds_first_stage()) {
      TensorList part;
      for (const Tensor& x : inputs) part.push_back(x.narrow(0, start, run.sizes[m]).detach());
      run.first_inputs.push_back(std::move(part));
    }
    if (holds_last_stage()) {
      if (m == 0)
        KILN_CHECK(target.defined() && target.dim() > 0 && target.size(0) == run.batch, "Pipeline::step: the target",
                   target.defined() ? str(" has shape ", target.shape()) : std::string(" is missing"),
                   " but the batch on stage 0's rank has ", run.batch, " examples");
      run.targets.push_back(target.narrow(0, start, run.sizes[m]).detach());
    }
    start += run.sizes[m];
  }

  // Run this rank's actions; a forward-only pass keeps the forwards and their messages.
  try {
    post_receives(run);
    const std::vector<Action>& actions = schedule_.ranks[rank_];
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& action = actions[i];
      run.action_index = i;
      run.completes_gradients = last_gradient_action_.at(action.stage) == i;
      const bool forward_only = action.type == ActionType::Forward ||
                                action.type == ActionType::SendActivations ||
                                action.type == ActionType::RecvActivations;
      if (!train && !forward_only) continue;
      const auto start = Clock::now();
      run_action(run, action);
      if (is_compute(action.type)) {
        const double seconds = seconds_since(start);
        times_.compute_seconds += seconds;
        action_seconds[{action.stage, action.type}].add(seconds);
      }
      if (action.type == ActionType::RecvActivations || action.type == ActionType::RecvGrads)
        times_.recv_seconds += seconds_since(start);
    }
    for (const WorkPtr& work : run.sends) work->wait();
  } catch (...) {
    // Sends still in flight reference tensors of `run`: wait for them
    // (each fails or completes within the group's timeout) before unwinding.
    for (const WorkPtr& work : run.sends) {
      try {
        work->wait();
      } catch (...) {
      }
    }
    throw;
  }
  if (train) exchange_tied_gradients();
  times_.seconds = seconds_since(step_start);
  times_.other_seconds = times_.seconds - times_.compute_seconds - times_.recv_seconds;
  for (int stage : schedule_.stages_of(rank_)) {
    auto mean = [&](ActionType type) {
      auto it = action_seconds.find({stage, type});
      return it == action_seconds.end() ? 0.0 : it->second.mean();
    };
    times_.stage_costs[stage] = ActionCosts{mean(ActionType::Forward), mean(ActionType::Backward),
                                            mean(ActionType::BackwardInput), mean(ActionType::BackwardWeight)};
  }
  return holds_last_stage() ? run.loss_sum : Tensor();
}

void Pipeline::post_receives(Run& run) {
  const std::vector<Action>& actions = schedule_.ranks[rank_];
  // What each receive will get, where its shapes are known from an earlier
  // handshake, and its channel (source rank, tag). A channel on which some
  // receive still waits for a handshake posts nothing ahead: a receive
  // posted early would take the handshake's message.
  std::vector<std::optional<Signature>> expected(actions.size());
  std::vector<std::pair<int, int>> channel(actions.size());
  std::map<std::pair<int, int>, bool> channel_known;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int64_t size = run.sizes[a.micro_batch];
    if (a.type == ActionType::RecvActivations) {
      channel[i] = {schedule_.stage_rank[a.stage - 1], kTagActivations};
      auto known = handshakes_.find({a.stage - 1, size});
      if (known != handshakes_.end()) expected[i] = known->second;
    } else if (a.type == ActionType::RecvGrads && run.train) {
      // The gradients of this stage's floating-point outputs, whose shapes
      // this rank sent in its own handshake.
      channel[i] = {schedule_.stage_rank[a.stage + 1], kTagGrads};
      auto known = handshakes_.find({a.stage, size});
      if (known != handshakes_.end()) expected[i] = floating_only(known->second);
    } else {
      continue;
    }
    auto it = channel_known.emplace(channel[i], true).first;
    it->second = it->second && expected[i].has_value();
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!expected[i] || !channel_known.at(channel[i])) continue;
    run.posted[i] = post_receive(*group_, *expected[i], device_of(*stages_.at(actions[i].stage)), channel[i].first,
                                 channel[i].second);
  }
}

void Pipeline::run_action(Run& run, const Action& a) {
  const int s = a.stage, m = a.micro_batch;
  const int S = schedule_.num_stages;
  MicroBatchState& st = run.states[{s, m}];
  const bool prev_here = s > 0 && schedule_.stage_rank[s - 1] == rank_;
  nn::Module& module = *stages_.at(s);
  auto* ddp = dynamic_cast<DistributedDataParallel*>(&module);
  auto* sharded = dynamic_cast<fsdp::FullyShardedDataParallel*>(&module);
  // An FSDP stage keeps its full gradients over the micro-batches and
  // reduce-scatters their sum in its last backward.
  std::optional<fsdp::FullyShardedDataParallel::NoSync> fsdp_accumulates;
  if (sharded && !run.completes_gradients &&
      (a.type == ActionType::Backward || a.type == ActionType::BackwardWeight))
    fsdp_accumulates.emplace(sharded->no_sync());
  auto where = [&] { return str("pipeline stage ", s, ", micro-batch ", m); };

  // The roots of this stage's backward and the gradients they receive.
  auto backward_roots = [&](TensorList& roots, TensorList& grads) {
    if (s == S - 1) {
      roots.push_back(st.loss);
      return;
    }
    for (size_t i = 0; i < st.outputs.size(); ++i) {
      if (!st.outputs[i].requires_grad()) continue;
      KILN_CHECK(i < st.output_grads.size() && st.output_grads[i].defined(), where(),
                 ": no gradient arrived for output ", i);
      roots.push_back(st.outputs[i]);
      grads.push_back(st.output_grads[i]);
    }
  };
  // The gradients of the inputs, once computed: handed to the previous
  // stage when it is on this rank.
  auto input_grads_done = [&](TensorList grads) {
    st.input_grads = std::move(grads);
    if (prev_here) run.states[{s - 1, m}].output_grads = st.input_grads;
    if (s == 0 || prev_here) st.input_grads_passed = true;
  };
  auto release = [&] { run.states.erase({s, m}); };
  // The (stage, micro-batch) is over once its graph is freed and its input
  // gradients have gone where they go.
  auto release_if_done = [&] {
    if (st.backward_done && st.input_grads_passed) release();
  };

  switch (a.type) {
    case ActionType::Forward: {
      const bool checkpointed = run.train && options_.checkpoint_activations;
      if (s == 0) {
        // A checkpointed stage must have an input that requires grad for
        // its backward to run (autograd/checkpoint.h): stage 0's floating
        // data become such leaves (their gradient is computed and dropped).
        for (const Tensor& x : run.first_inputs[m]) st.inputs.push_back(checkpointed ? stage_input(x, true) : x);
      } else if (prev_here) {
        for (const Tensor& x : run.states.at({s - 1, m}).outputs) st.inputs.push_back(stage_input(x, run.train));
      }
      // A data-parallel stage reduces once per step, in its last backward.
      auto call = [&module, ddp](const TensorList& in) {
        if (!ddp) return module(in);
        auto local = ddp->no_sync();
        return module(in);
      };
      bool any_requires_grad = false;
      for (const Tensor& x : st.inputs) any_requires_grad = any_requires_grad || x.requires_grad();
      // A stage with no such input (a GPT's token ids) runs without checkpointing.
      st.outputs = checkpointed && any_requires_grad ? autograd::checkpoint(call, st.inputs) : call(st.inputs);
      if (s == S - 1) {
        Tensor loss = loss_(st.outputs, run.targets[m]);
        KILN_CHECK(loss.defined() && loss.numel() == 1, where(), ": the loss function returned ",
                   loss.defined() ? str("shape ", loss.shape()) : std::string("nothing"), ", not a scalar");
        st.loss = loss.reshape({}) * (static_cast<double>(run.sizes[m]) / static_cast<double>(run.batch));
        Tensor value = st.loss.detach();
        run.loss_sum = run.loss_sum.defined() ? ops::add(run.loss_sum, value) : value.clone();
        if (!run.train) release();
      }
      break;
    }
    case ActionType::SendActivations: {
      const int dst = schedule_.stage_rank[s + 1];
      const Signature sig = signature_of(st.outputs);
      const auto key = std::make_pair(s, run.sizes[m]);
      auto known = handshakes_.find(key);
      if (known == handshakes_.end()) {
        Tensor header = encode(sig);
        Tensor length = full({1}, static_cast<double>(header.numel()), TensorOptions(DType::Int64));
        run.sends.push_back(group_->isend(length, dst, kTagActivations));
        run.sends.push_back(group_->isend(header, dst, kTagActivations));
        handshakes_.emplace(key, sig);
      } else {
        KILN_CHECK(known->second == sig, where(), ": the outputs are ", describe(sig), " but were ",
                   describe(known->second), " for micro-batches of ", run.sizes[m],
                   " examples when the stages first exchanged shapes");
      }
      for (const Tensor& out : st.outputs) {
        Tensor data = out.detach().contiguous();
        run.sends.push_back(group_->isend(data, dst, kTagActivations));
      }
      if (!run.train) release();
      break;
    }
    case ActionType::RecvActivations: {
      auto posted = run.posted.find(run.action_index);
      if (posted == run.posted.end()) {
        // Not posted ahead: the shapes may first have to come (the handshake).
        const int src = schedule_.stage_rank[s - 1];
        const auto key = std::make_pair(s - 1, run.sizes[m]);
        auto known = handshakes_.find(key);
        if (known == handshakes_.end()) {
          Tensor length = zeros({1}, TensorOptions(DType::Int64));
          group_->irecv(length, src, kTagActivations)->wait();
          Tensor header = zeros({length.data<int64_t>()[0]}, TensorOptions(DType::Int64));
          group_->irecv(header, src, kTagActivations)->wait();
          known = handshakes_.emplace(key, decode(header)).first;
        }
        posted = run.posted.emplace(run.action_index,
                                    post_receive(*group_, known->second, device_of(module), src, kTagActivations))
                     .first;
      }
      for (const auto& [buffer, work] : posted->second) {
        work->wait();
        st.inputs.push_back(stage_input(buffer, run.train));
      }
      break;
    }
    case ActionType::Backward: {
      TensorList roots, grads;
      backward_roots(roots, grads);
      if (ddp && run.completes_gradients) ddp->prepare_for_backward(roots);
      if (!roots.empty()) autograd::run_backward(roots, grads, false, false);
      TensorList input_grads;
      for (const Tensor& x : st.inputs) input_grads.push_back(x.requires_grad() ? x.grad() : Tensor());
      input_grads_done(std::move(input_grads));
      st.backward_done = true;
      release_if_done();
      break;
    }
    case ActionType::BackwardInput: {
      TensorList roots, grads, wanted;
      backward_roots(roots, grads);
      for (const Tensor& x : st.inputs)
        if (x.requires_grad()) wanted.push_back(x);
      // Without inputs to differentiate (stage 0), all of backward is W's.
      TensorList input_grads(st.inputs.size());
      if (!roots.empty() && !wanted.empty()) {
        TensorList got = autograd::backward_input(roots, wanted, grads, st.rest);
        for (size_t i = 0, k = 0; i < st.inputs.size(); ++i)
          if (st.inputs[i].requires_grad()) input_grads[i] = got[k++];
        st.split = true;
      }
      input_grads_done(std::move(input_grads));
      break;
    }
    case ActionType::BackwardWeight: {
      TensorList roots, grads;
      backward_roots(roots, grads);
      if (ddp && run.completes_gradients) ddp->prepare_for_backward(roots);
      if (st.split) {
        autograd::backward_weight(std::move(st.rest));
      } else if (!roots.empty()) {
        autograd::run_backward(roots, grads, false, false);
      }
      st.backward_done = true;
      release_if_done();
      break;
    }
    case ActionType::SendGrads: {
      const int dst = schedule_.stage_rank[s - 1];
      for (size_t i = 0; i < st.inputs.size(); ++i) {
        if (!is_floating(st.inputs[i].dtype())) continue;
        Tensor g = i < st.input_grads.size() && st.input_grads[i].defined() ? st.input_grads[i].contiguous()
                                                                            : zeros_like(st.inputs[i]);
        run.sends.push_back(group_->isend(g, dst, kTagGrads));
      }
      st.input_grads.clear();
      st.input_grads_passed = true;
      release_if_done();  // after I, the state waits for W
      break;
    }
    case ActionType::RecvGrads: {
      auto posted = run.posted.find(run.action_index);
      if (posted == run.posted.end())
        posted = run.posted
                     .emplace(run.action_index, post_receive(*group_, floating_only(signature_of(st.outputs)),
                                                             device_of(module), schedule_.stage_rank[s + 1], kTagGrads))
                     .first;
      st.output_grads.assign(st.outputs.size(), Tensor());
      size_t k = 0;
      for (size_t i = 0; i < st.outputs.size(); ++i) {
        if (!is_floating(st.outputs[i].dtype())) continue;
        const auto& [buffer, work] = posted->second.at(k++);
        work->wait();
        st.output_grads[i] = buffer;
      }
      break;
    }
  }
}

void Pipeline::exchange_tied_gradients() {
  NoGradGuard no_grad;
  for (const TiedParameter& tied : options_.tied) {
    std::vector<Tensor> params(tied.size()), parts(tied.size());
    std::set<int> remote_ranks;
    for (size_t j = 0; j < tied.size(); ++j) {
      const int holder = schedule_.stage_rank[tied[j].first];
      if (holder == rank_) {
        params[j] = stages_.at(tied[j].first)->named_parameters().at(tied[j].second);
        parts[j] = params[j].grad().defined() ? params[j].grad() : zeros_like(params[j]);
      } else {
        remote_ranks.insert(holder);
      }
    }
    if (remote_ranks.empty()) continue;  // one process: one tensor, nothing to add
    bool holds_any = false;
    for (const Tensor& p : params) holds_any = holds_any || p.defined();
    if (!holds_any) continue;
    // Each holder sends its parts to every other holder, in member order,
    // and everyone adds all parts in member (stage) order.
    std::vector<WorkPtr> sends;
    for (size_t j = 0; j < tied.size(); ++j) {
      if (!parts[j].defined()) continue;
      parts[j] = parts[j].contiguous();
      for (int q : remote_ranks) sends.push_back(group_->isend(parts[j], q, kTagTied));
    }
    Tensor like;
    for (const Tensor& p : params)
      if (p.defined()) like = p;
    for (size_t j = 0; j < tied.size(); ++j) {
      if (parts[j].defined()) continue;
      parts[j] = empty(like.shape(), TensorOptions(like.dtype(), like.device()));
      group_->irecv(parts[j], schedule_.stage_rank[tied[j].first], kTagTied)->wait();
    }
    for (const WorkPtr& w : sends) w->wait();
    Tensor sum = parts[0].clone();
    for (size_t j = 1; j < parts.size(); ++j) sum = ops::add(sum, parts[j]);
    std::set<const void*> done;
    for (const Tensor& p : params)
      if (p.defined() && done.insert(p.impl()).second) p.set_grad(sum.clone());
  }
}

std::vector<Tensor> Pipeline::parameters() const {
  std::vector<Tensor> out;
  std::set<const void*> seen;
  for (const auto& [s, module] : stages_)
    for (const Tensor& p : module->parameters())
      if (seen.insert(p.impl()).second) out.push_back(p);
  return out;
}

double Pipeline::clip_grad_norm_(double max_norm) {
  NoGradGuard no_grad;
  // A tied tensor's gradient counts once: on the holder of its first stage.
  std::set<const void*> not_counted;
  for (const TiedParameter& tied : options_.tied)
    for (size_t j = 1; j < tied.size(); ++j)
      if (schedule_.stage_rank[tied[j].first] == rank_ && schedule_.stage_rank[tied[0].first] != rank_)
        not_counted.insert(stages_.at(tied[j].first)->named_parameters().at(tied[j].second).impl());
  // Per stage: the sum of squares of its gradients; an FSDP stage's are
  // shards, summed over its shard group first.
  auto squares = [&](const std::vector<Tensor>& params) {
    double sum = 0.0;
    for (const Tensor& p : params) {
      if (!p.grad().defined() || not_counted.count(p.impl())) continue;
      Tensor g64 = p.grad().to(DType::Float64);
      sum += ops::sum(ops::mul(g64, g64)).item<double>();
      not_counted.insert(p.impl());  // a tensor shared by two stages here counts once
    }
    return sum;
  };
  double local = 0.0;
  for (const auto& [s, module] : stages_) {
    double stage_sum = squares(module->parameters());
    if (auto* sharded = dynamic_cast<fsdp::FullyShardedDataParallel*>(module.get())) {
      Tensor t = full({1}, stage_sum, TensorOptions(DType::Float64, sharded->shard_group()->collective_device()));
      sharded->shard_group()->all_reduce(t)->wait();
      stage_sum = t.to(kCPU).data<double>()[0];
    }
    local += stage_sum;
  }
  const std::vector<Tensor> params = parameters();
  Tensor total = full({1}, local, TensorOptions(DType::Float64, group_->collective_device()));
  group_->all_reduce(total)->wait();
  const double norm = std::sqrt(total.to(kCPU).data<double>()[0]);
  const double coef = std::min(max_norm / (norm + 1e-6), 1.0);
  if (coef != 1.0)
    for (const Tensor& p : params)
      if (p.grad().defined()) {
        Tensor g = p.grad();
        ops::mul_(g, coef);
      }
  return norm;
}

// ---- splitting ----

std::vector<std::shared_ptr<nn::Module>> split_sequential(const nn::Sequential& model,
                                                          const std::vector<int64_t>& balance) {
  KILN_CHECK(!balance.empty(), "split_sequential: the balance is empty");
  int64_t total = 0;
  for (size_t i = 0; i < balance.size(); ++i) {
    KILN_CHECK(balance[i] >= 1, "split_sequential: stage ", i, " gets ", balance[i],
               " modules; every stage needs at least one");
    total += balance[i];
  }
  KILN_CHECK(total == static_cast<int64_t>(model.size()), "split_sequential: the balance adds up to ", total,
             " modules but the model has ", model.size());
  // named_children() lists a module held twice once: such a model has no
  // position-by-position list of names to cut.
  const auto children = model.named_children();
  KILN_CHECK(children.size() == model.size(), "split_sequential: the model holds ", model.size(), " modules but only ",
             children.size(), " distinct ones; a module used twice cannot be cut into stages (give each place its own",
             " module)");
  std::vector<std::shared_ptr<nn::Module>> stages;
  size_t at = 0;
  for (int64_t count : balance) {
    std::vector<nn::NamedModule> part(children.begin() + at, children.begin() + at + count);
    stages.push_back(std::make_shared<nn::Sequential>(part));
    at += count;
  }
  return stages;
}

std::vector<int64_t> balance_by_costs(const std::vector<double>& costs, int num_stages) {
  const int n = static_cast<int>(costs.size());
  KILN_CHECK(num_stages >= 1 && num_stages <= n, "balance_by_costs: cannot cut ", n, " modules into ", num_stages,
             " stages of at least one module each");
  for (size_t i = 0; i < costs.size(); ++i)
    KILN_CHECK(costs[i] >= 0 && std::isfinite(costs[i]), "balance_by_costs: module ", i, " has cost ", costs[i]);
  // best[k][i]: the smallest possible largest stage cost cutting the first i
  // modules into k stages; cut[k][i] where its last stage starts.
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(num_stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= num_stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double worst = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (worst < best[k][i]) best[k][i] = worst, cut[k][i] = j;
      }
  std::vector<int64_t> balance(num_stages);
  for (int k = num_stages, i = n; k >= 1; --k) {
    balance[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  return balance;
}

std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int num_stages) {
  std::vector<double> costs;
  for (const auto& module : model) {
    double count = 0;
    for (const Tensor& p : module->parameters()) count += static_cast<double>(p.numel());
    costs.push_back(count);
  }
  return balance_by_costs(costs, num_stages);
}

std::vector<int64_t> balance_by_time(nn::Sequential& model, const Tensor& sample, int num_stages, int repeats) {
  KILN_CHECK(repeats >= 1, "balance_by_time: repeats must be at least 1, got ", repeats);
  std::vector<std::vector<double>> times(model.size());
  for (int r = 0; r < repeats; ++r) {
    Tensor x = sample;
    for (size_t i = 0; i < model.size(); ++i) {
      Tensor in = stage_input(x, true);
      const auto t0 = Clock::now();
      Tensor out = (*model[static_cast<int64_t>(i)])(in);
      Tensor total = is_floating(out.dtype()) ? kiln::sum(out) : Tensor();
      if (total.defined() && total.requires_grad()) total.backward();
      times[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      x = out.detach();
    }
  }
  for (const auto& module : model)
    for (const Tensor& p : module->parameters()) p.set_grad(Tensor());
  std::vector<double> costs;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    costs.push_back(t[t.size() / 2]);
  }
  return balance_by_costs(costs, num_stages);
}

}  // namespace kiln::distributed::pipeline
