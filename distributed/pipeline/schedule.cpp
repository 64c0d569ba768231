#include "distributed/pipeline/schedule.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "tensor/error.h"

namespace kiln::distributed::pipeline {

using detail::str;

const char* action_type_name(ActionType type) {
  switch (type) {
    case ActionType::Forward: return "F";
    case ActionType::Backward: return "B";
    case ActionType::BackwardInput: return "I";
    case ActionType::BackwardWeight: return "W";
    case ActionType::SendActivations: return "SEND_F";
    case ActionType::RecvActivations: return "RECV_F";
    case ActionType::SendGrads: return "SEND_B";
    case ActionType::RecvGrads: return "RECV_B";
  }
  return "?";
}

bool is_compute(ActionType type) {
  return type == ActionType::Forward || type == ActionType::Backward || type == ActionType::BackwardInput ||
         type == ActionType::BackwardWeight;
}

std::string Action::str() const {
  return detail::str(action_type_name(type), " s", stage, " m", micro_batch);
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < static_cast<int>(stage_rank.size()); ++s)
    if (stage_rank[s] == rank) stages.push_back(s);
  return stages;
}

// ---- building schedules ----

namespace {

Action make(ActionType type, int stage, int micro_batch) { return Action{type, stage, micro_batch}; }

void check_sizes(const char* name, int num_ranks, int num_micro_batches) {
  KILN_CHECK(num_ranks >= 1, "pipeline schedule '", name, "': the number of ranks must be at least 1, got ",
             num_ranks);
  KILN_CHECK(num_micro_batches >= 1, "pipeline schedule '", name,
             "': the number of micro-batches must be at least 1, got ", num_micro_batches);
}

std::vector<int> one_stage_per_rank(int num_ranks) {
  std::vector<int> stage_rank(num_ranks);
  for (int r = 0; r < num_ranks; ++r) stage_rank[r] = r;
  return stage_rank;
}

}  // namespace

Schedule with_communication(std::string name, int num_micro_batches, std::vector<int> stage_rank,
                            const std::vector<std::vector<Action>>& compute) {
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.num_ranks = static_cast<int>(compute.size());
  schedule.num_stages = static_cast<int>(stage_rank.size());
  schedule.num_micro_batches = num_micro_batches;
  schedule.stage_rank = std::move(stage_rank);
  schedule.ranks.resize(compute.size());
  const int S = schedule.num_stages;
  // The rank of stage s, or -1 outside 0..S-1 (no neighbour there).
  auto rank_of = [&](int s) { return s >= 0 && s < S ? schedule.stage_rank[s] : -1; };
  for (int r = 0; r < schedule.num_ranks; ++r) {
    std::vector<Action>& out = schedule.ranks[r];
    for (const Action& a : compute[r]) {
      const int s = a.stage, m = a.micro_batch;
      const bool prev_elsewhere = s > 0 && rank_of(s - 1) != r;
      const bool next_elsewhere = s < S - 1 && rank_of(s + 1) != r;
      switch (a.type) {
        case ActionType::Forward:
          if (prev_elsewhere) out.push_back(make(ActionType::RecvActivations, s, m));
          out.push_back(a);
          if (next_elsewhere) out.push_back(make(ActionType::SendActivations, s, m));
          break;
        case ActionType::Backward:
        case ActionType::BackwardInput:
          if (next_elsewhere) out.push_back(make(ActionType::RecvGrads, s, m));
          out.push_back(a);
          if (prev_elsewhere) out.push_back(make(ActionType::SendGrads, s, m));
          break;
        default: out.push_back(a);
      }
    }
  }
  return schedule;
}

Schedule gpipe(int num_ranks, int num_micro_batches) {
  check_sizes("gpipe", num_ranks, num_micro_batches);
  std::vector<std::vector<Action>> compute(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    for (int m = 0; m < num_micro_batches; ++m) compute[r].push_back(make(ActionType::Forward, r, m));
    for (int m = 0; m < num_micro_batches; ++m) compute[r].push_back(make(ActionType::Backward, r, m));
  }
  return with_communication("gpipe", num_micro_batches, one_stage_per_rank(num_ranks), compute);
}

Schedule one_f_one_b(int num_ranks, int num_micro_batches) {
  check_sizes("1f1b", num_ranks, num_micro_batches);
  const int p = num_ranks, M = num_micro_batches;
  std::vector<std::vector<Action>> compute(p);
  for (int r = 0; r < p; ++r) {
    // Warm-up: enough forwards that the first backward arrives just as
    // they run out; then one forward and one backward in turn.
    const int warmup = std::min(p - 1 - r, M);
    int f = 0, b = 0;
    for (; f < warmup; ++f) compute[r].push_back(make(ActionType::Forward, r, f));
    for (; f < M; ++f, ++b) {
      compute[r].push_back(make(ActionType::Forward, r, f));
      compute[r].push_back(make(ActionType::Backward, r, b));
    }
    for (; b < M; ++b) compute[r].push_back(make(ActionType::Backward, r, b));
  }
  return with_communication("1f1b", M, one_stage_per_rank(p), compute);
}

Schedule interleaved_1f1b(int num_ranks, int stages_per_rank, int num_micro_batches) {
  check_sizes("interleaved", num_ranks, num_micro_batches);
  const int p = num_ranks, v = stages_per_rank, M = num_micro_batches;
  KILN_CHECK(v >= 1, "pipeline schedule 'interleaved': stages per rank must be at least 1, got ", v);
  KILN_CHECK(M % p == 0, "pipeline schedule 'interleaved': the number of micro-batches (", M,
             ") must be a multiple of the number of ranks (", p,
             "): micro-batches go through each rank's stages in groups of ", p);
  std::vector<int> stage_rank(p * v);
  for (int s = 0; s < p * v; ++s) stage_rank[s] = s % p;
  // Megatron's order of "virtual micro-batches": k runs over M*v (chunk,
  // micro-batch) pairs, p micro-batches through chunk 0, the same p through
  // chunk 1, ..., then the next group of p. Backward runs the chunks in
  // reverse. The order is the same on every rank, which keeps the messages
  // on each channel in the order their receiver expects.
  const int total = M * v;
  auto micro_batch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k % (p * v)) / p; };
  auto backward_chunk = [&](int k) { return v - 1 - (k % (p * v)) / p; };
  std::vector<std::vector<Action>> compute(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    auto forward = [&](int k) { return make(ActionType::Forward, forward_chunk(k) * p + r, micro_batch_of(k)); };
    auto backward = [&](int k) { return make(ActionType::Backward, backward_chunk(k) * p + r, micro_batch_of(k)); };
    int f = 0, b = 0;
    for (; f < warmup; ++f) compute[r].push_back(forward(f));
    for (; f < total; ++f, ++b) {
      compute[r].push_back(forward(f));
      compute[r].push_back(backward(b));
    }
    for (; b < total; ++b) compute[r].push_back(backward(b));
  }
  return with_communication("interleaved", M, stage_rank, compute);
}

Schedule zero_bubble(int num_ranks, int num_micro_batches) {
  check_sizes("zero-bubble", num_ranks, num_micro_batches);
  const int p = num_ranks, M = num_micro_batches;
  // A greedy run in whole time units (F = I = W = 1). A rank that is free
  // runs, in this order of preference: the next I whose output gradient has
  // arrived (the previous rank waits for it), the next F whose input has
  // arrived if fewer than p-r micro-batches await their I (1F1B's rule) and
  // fewer than p hold activations (1F1B's peak), or the oldest W still
  // owed. A W ends a micro-batch's hold on its activations.
  constexpr int kNotYet = -1;
  std::vector<std::vector<int>> f_end(p, std::vector<int>(M, kNotYet)), i_end = f_end;
  std::vector<int> next_f(p, 0), next_i(p, 0), next_w(p, 0), busy_until(p, 0);
  std::vector<std::vector<Action>> compute(p);
  auto ready = [](int end, int t) { return end != kNotYet && end <= t; };
  for (int t = 0;; ++t) {
    bool all_done = true;
    for (int r = 0; r < p; ++r) {
      if (next_w[r] < M) all_done = false;
      if (busy_until[r] > t) continue;
      const int i = next_i[r], f = next_f[r];
      const bool grad_arrived = i < M && ready(f_end[r][i], t) && (r == p - 1 || ready(i_end[r + 1][i], t));
      const bool input_arrived = f < M && (r == 0 || ready(f_end[r - 1][f], t));
      const bool memory_left = f - next_i[r] < p - r && f - next_w[r] < p;
      if (grad_arrived) {
        compute[r].push_back(make(ActionType::BackwardInput, r, i));
        i_end[r][i] = t + 1;
        ++next_i[r];
      } else if (input_arrived && memory_left) {
        compute[r].push_back(make(ActionType::Forward, r, f));
        f_end[r][f] = t + 1;
        ++next_f[r];
      } else if (next_w[r] < next_i[r]) {
        compute[r].push_back(make(ActionType::BackwardWeight, r, next_w[r]));
        ++next_w[r];
      } else {
        continue;
      }
      busy_until[r] = t + 1;
    }
    if (all_done) break;
  }
  return with_communication("zero-bubble", M, one_stage_per_rank(p), compute);
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zero-bubble"};
  return names;
}

Schedule make_schedule(const std::string& name, int num_ranks, int num_micro_batches, int stages_per_rank) {
  if (name == "interleaved") {
    KILN_CHECK(stages_per_rank >= 2, "pipeline schedule 'interleaved': needs at least 2 stages per rank, got ",
               stages_per_rank);
    return interleaved_1f1b(num_ranks, stages_per_rank, num_micro_batches);
  }
  KILN_CHECK(stages_per_rank == 1, "pipeline schedule '", name, "' runs one stage per rank, got ",
             stages_per_rank, " stages per rank (only 'interleaved' runs several)");
  if (name == "gpipe") return gpipe(num_ranks, num_micro_batches);
  if (name == "1f1b") return one_f_one_b(num_ranks, num_micro_batches);
  if (name == "zero-bubble") return zero_bubble(num_ranks, num_micro_batches);
  std::string known;
  for (const std::string& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("pipeline schedule: unknown schedule '", name, "' (known: ", known, ")");
}

// ---- checking ----

namespace {

// Activations and gradients travel on different channels.
enum class Channel { Activations, Grads };

struct Message {
  Action action;  // the SEND_F or SEND_B
  int rank;
  size_t index;
  double time;
};

using ChannelKey = std::tuple<int, int, Channel>;  // source rank, destination rank, kind

// Where an action's message goes or comes from.
struct Route {
  ChannelKey key;
  int peer;
};

Route route_of(const Schedule& s, int rank, const Action& a) {
  switch (a.type) {
    case ActionType::SendActivations: {
      const int peer = s.stage_rank[a.stage + 1];
      return {{rank, peer, Channel::Activations}, peer};
    }
    case ActionType::RecvActivations: {
      const int peer = s.stage_rank[a.stage - 1];
      return {{peer, rank, Channel::Activations}, peer};
    }
    case ActionType::SendGrads: {
      const int peer = s.stage_rank[a.stage - 1];
      return {{rank, peer, Channel::Grads}, peer};
    }
    case ActionType::RecvGrads: {
      const int peer = s.stage_rank[a.stage + 1];
      return {{peer, rank, Channel::Grads}, peer};
    }
    default: return {{-1, -1, Channel::Activations}, -1};
  }
}

// What a receive expects its message to be.
Action expected_send(const Action& recv) {
  return recv.type == ActionType::RecvActivations ? make(ActionType::SendActivations, recv.stage - 1, recv.micro_batch)
                                                  : make(ActionType::SendGrads, recv.stage + 1, recv.micro_batch);
}

std::string where(const Schedule& s, int rank, size_t index) {
  return str("pipeline schedule '", s.name, "': rank ", rank, ", action ", index, " (", s.ranks[rank][index].str(),
             ")");
}

void check_shape_of_schedule(const Schedule& s) {
  const std::string name = str("pipeline schedule '", s.name, "'");
  KILN_CHECK(s.num_ranks >= 1 && static_cast<int>(s.ranks.size()) == s.num_ranks, name, ": num_ranks is ",
             s.num_ranks, " but there are action lists for ", s.ranks.size(), " ranks");
  KILN_CHECK(s.num_stages >= 1 && static_cast<int>(s.stage_rank.size()) == s.num_stages, name, ": num_stages is ",
             s.num_stages, " but stage_rank places ", s.stage_rank.size(), " stages");
  KILN_CHECK(s.num_micro_batches >= 1, name, ": the number of micro-batches must be at least 1, got ",
             s.num_micro_batches);
  std::vector<int> stages_per_rank(s.num_ranks, 0);
  for (int st = 0; st < s.num_stages; ++st) {
    KILN_CHECK(s.stage_rank[st] >= 0 && s.stage_rank[st] < s.num_ranks, name, ": stage ", st,
               " is placed on rank ", s.stage_rank[st], ", outside 0..", s.num_ranks - 1);
    ++stages_per_rank[s.stage_rank[st]];
  }
  for (int r = 0; r < s.num_ranks; ++r)
    KILN_CHECK(stages_per_rank[r] > 0, name, ": rank ", r, " holds no stage");
}

// Each rank's list on its own: every action in place and in order, every
// (stage, micro-batch) of the rank complete.
void check_rank(const Schedule& s, int r) {
  const int S = s.num_stages;
  using Key = std::pair<int, int>;  // (stage, micro-batch)
  std::set<Key> forward, backward, input, weight, recv_f, recv_b, send_f, send_b;
  auto same_rank = [&](int stage) { return stage >= 0 && stage < S && s.stage_rank[stage] == r; };
  auto has_grad = [&](const Key& k) { return backward.count(k) || input.count(k); };
  const std::vector<Action>& actions = s.ranks[r];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    KILN_CHECK(a.stage >= 0 && a.stage < S, where(s, r, i), ": stage ", a.stage, " is outside 0..", S - 1);
    KILN_CHECK(a.micro_batch >= 0 && a.micro_batch < s.num_micro_batches, where(s, r, i), ": micro-batch ",
               a.micro_batch, " is outside 0..", s.num_micro_batches - 1);
    KILN_CHECK(s.stage_rank[a.stage] == r, where(s, r, i), ": stage ", a.stage, " runs on rank ",
               s.stage_rank[a.stage], ", not on rank ", r);
    const int st = a.stage, m = a.micro_batch;
    const Key k{st, m}, prev{st - 1, m}, next{st + 1, m};
    auto once = [&](std::set<Key>& done, const char* what) {
      KILN_CHECK(done.insert(k).second, where(s, r, i), ": ", what, " a second time");
    };
    switch (a.type) {
      case ActionType::Forward:
        if (st > 0 && same_rank(st - 1))
          KILN_CHECK(forward.count(prev), where(s, r, i), ": runs before F s", st - 1, " m", m,
                     " on this rank has produced its input");
        if (st > 0 && !same_rank(st - 1))
          KILN_CHECK(recv_f.count(k), where(s, r, i), ": runs before its input is received (RECV_F s", st, " m",
                     m, ")");
        once(forward, "runs forward");
        break;
      case ActionType::Backward:
      case ActionType::BackwardInput:
        KILN_CHECK(forward.count(k), where(s, r, i), ": runs before F s", st, " m", m);
        if (st < S - 1 && same_rank(st + 1))
          KILN_CHECK(has_grad(next), where(s, r, i), ": runs before stage ", st + 1, " on this rank has computed",
                     " the gradient of its output");
        if (st < S - 1 && !same_rank(st + 1))
          KILN_CHECK(recv_b.count(k), where(s, r, i), ": runs before the gradient of its output is received",
                     " (RECV_B s", st, " m", m, ")");
        KILN_CHECK(!has_grad(k), where(s, r, i), ": backpropagates micro-batch ", m, " through stage ", st,
                   " a second time");
        (a.type == ActionType::Backward ? backward : input).insert(k);
        break;
      case ActionType::BackwardWeight:
        KILN_CHECK(input.count(k), where(s, r, i), ": runs before I s", st, " m", m);
        once(weight, "computes the weight gradient");
        break;
      case ActionType::SendActivations:
        KILN_CHECK(st < S - 1 && !same_rank(st + 1), where(s, r, i), ": ",
                   st == S - 1 ? "the last stage has no next stage to send to"
                               : "the next stage is on this rank; nothing is sent");
        KILN_CHECK(forward.count(k), where(s, r, i), ": sends activations that F s", st, " m", m,
                   " has not computed yet");
        once(send_f, "sends these activations");
        break;
      case ActionType::SendGrads:
        KILN_CHECK(st > 0 && !same_rank(st - 1), where(s, r, i), ": ",
                   st == 0 ? "the first stage has no previous stage to send to"
                           : "the previous stage is on this rank; nothing is sent");
        KILN_CHECK(has_grad(k), where(s, r, i), ": sends a gradient that B (or I) s", st, " m", m,
                   " has not computed yet");
        once(send_b, "sends this gradient");
        break;
      case ActionType::RecvActivations:
        KILN_CHECK(st > 0 && !same_rank(st - 1), where(s, r, i), ": ",
                   st == 0 ? "the first stage receives nothing"
                           : "the previous stage is on this rank; nothing is received");
        once(recv_f, "receives these activations");
        break;
      case ActionType::RecvGrads:
        KILN_CHECK(st < S - 1 && !same_rank(st + 1), where(s, r, i), ": ",
                   st == S - 1 ? "the last stage receives no gradient"
                               : "the next stage is on this rank; nothing is received");
        once(recv_b, "receives this gradient");
        break;
    }
  }
  const std::string rank_name = str("pipeline schedule '", s.name, "': rank ", r);
  for (int st : s.stages_of(r)) {
    for (int m = 0; m < s.num_micro_batches; ++m) {
      const Key k{st, m};
      KILN_CHECK(forward.count(k), rank_name, " never runs F s", st, " m", m);
      KILN_CHECK(has_grad(k), rank_name, " never runs B (or I) s", st, " m", m);
      KILN_CHECK(!input.count(k) || weight.count(k), rank_name, " runs I s", st, " m", m, " but never W s", st,
                 " m", m);
      if (st < S - 1 && !same_rank(st + 1))
        KILN_CHECK(send_f.count(k), rank_name, " never sends the activations of F s", st, " m", m);
      if (st > 0 && !same_rank(st - 1))
        KILN_CHECK(send_b.count(k), rank_name, " never sends the gradient of B s", st, " m", m);
    }
  }
}

// Runs every rank's list under the runtime's rules (Note [Pipeline schedules
// as data]), with `on_compute(rank, action, ready_time)` returning when each
// compute action ends. Throws on a mismatched message or a deadlock.
template <class OnCompute>
void run_on_paper(const Schedule& s, OnCompute on_compute) {
  std::map<ChannelKey, std::deque<Message>> channels;
  std::vector<size_t> next(s.num_ranks, 0);
  std::vector<double> clock(s.num_ranks, 0.0);
  for (;;) {
    bool progress = false, finished = true;
    for (int r = 0; r < s.num_ranks; ++r) {
      const std::vector<Action>& actions = s.ranks[r];
      while (next[r] < actions.size()) {
        const size_t i = next[r];
        const Action& a = actions[i];
        if (a.type == ActionType::SendActivations || a.type == ActionType::SendGrads) {
          channels[route_of(s, r, a).key].push_back({a, r, i, clock[r]});
        } else if (a.type == ActionType::RecvActivations || a.type == ActionType::RecvGrads) {
          std::deque<Message>& queue = channels[route_of(s, r, a).key];
          if (queue.empty()) break;
          const Message message = queue.front();
          queue.pop_front();
          KILN_CHECK(message.action == expected_send(a), where(s, r, i), ": would receive what rank ",
                     message.rank, " sent at action ", message.index, " (", message.action.str(),
                     "), not the ", a.type == ActionType::RecvActivations ? "activations" : "gradient", " of ",
                     expected_send(a).str(), ": messages between two ranks arrive in the order they were sent");
          clock[r] = std::max(clock[r], message.time);
        } else {
          clock[r] = on_compute(r, a, clock[r]);
        }
        ++next[r];
        progress = true;
      }
      if (next[r] < actions.size()) finished = false;
    }
    if (finished) break;
    if (!progress) {
      std::string waits;
      for (int r = 0; r < s.num_ranks; ++r) {
        if (next[r] == s.ranks[r].size()) continue;
        waits += str("\n  rank ", r, " waits at action ", next[r], " (", s.ranks[r][next[r]].str(), ") for rank ",
                     route_of(s, r, s.ranks[r][next[r]]).peer);
      }
      KILN_FAIL("pipeline schedule '", s.name, "' would deadlock: every unfinished rank waits to receive", waits);
    }
  }
  // Every send has been received: each send needs its compute (check_rank),
  // and that compute's receiver cannot finish without receiving it.
}

}  // namespace

void validate(const Schedule& schedule) {
  check_shape_of_schedule(schedule);
  for (int r = 0; r < schedule.num_ranks; ++r) check_rank(schedule, r);
  run_on_paper(schedule, [](int, const Action&, double t) { return t; });
}

Timeline simulate(const Schedule& schedule, const ActionCosts& costs) {
  return simulate(schedule, std::vector<ActionCosts>(static_cast<size_t>(std::max(schedule.num_stages, 0)), costs));
}

Timeline simulate(const Schedule& schedule, const std::vector<ActionCosts>& stage_costs) {
  validate(schedule);
  KILN_CHECK(stage_costs.size() == static_cast<size_t>(schedule.num_stages), "pipeline schedule '", schedule.name,
             "': simulate was given costs for ", stage_costs.size(), " stages but the schedule has ",
             schedule.num_stages);
  Timeline timeline;
  std::vector<std::set<std::pair<int, int>>> holding(schedule.num_ranks);
  timeline.peak_in_flight.assign(schedule.num_ranks, 0);
  double busy = 0;
  run_on_paper(schedule, [&](int r, const Action& a, double start) {
    const ActionCosts& costs = stage_costs[static_cast<size_t>(a.stage)];
    double cost = costs.forward;
    const std::pair<int, int> key{a.stage, a.micro_batch};
    switch (a.type) {
      case ActionType::Forward:
        holding[r].insert(key);
        timeline.peak_in_flight[r] = std::max(timeline.peak_in_flight[r], static_cast<int>(holding[r].size()));
        break;
      case ActionType::Backward:
        cost = costs.backward;
        holding[r].erase(key);
        break;
      case ActionType::BackwardInput: cost = costs.backward_input; break;
      case ActionType::BackwardWeight:
        cost = costs.backward_weight;
        holding[r].erase(key);
        break;
      default: break;
    }
    timeline.compute.push_back({r, a, start, start + cost});
    timeline.makespan = std::max(timeline.makespan, start + cost);
    busy += cost;
    return start + cost;
  });
  timeline.busy = busy;
  timeline.bubble_fraction =
      timeline.makespan > 0 ? 1.0 - busy / (schedule.num_ranks * timeline.makespan) : 0.0;
  return timeline;
}

double bubble_formula(const Schedule& schedule) {
  const double p = schedule.num_ranks, m = schedule.num_micro_batches;
  const double v = static_cast<double>(schedule.num_stages) / schedule.num_ranks;
  return (p - 1) / (v * m + p - 1);
}

// ---- printing ----

std::string to_table(const Schedule& schedule) {
  size_t rows = 0, width = 6;
  for (const auto& actions : schedule.ranks) {
    rows = std::max(rows, actions.size());
    for (const Action& a : actions) width = std::max(width, a.str().size());
  }
  auto cell = [&](const std::string& text) { return text + std::string(width + 2 - text.size(), ' '); };
  std::ostringstream out;
  out << "pipeline schedule '" << schedule.name << "': " << schedule.num_ranks << " ranks, " << schedule.num_stages
      << " stages, " << schedule.num_micro_batches << " micro-batches\n";
  out << cell("step");
  for (int r = 0; r < schedule.num_ranks; ++r) out << cell(str("rank ", r));
  out << "\n";
  for (size_t i = 0; i < rows; ++i) {
    out << cell(std::to_string(i));
    for (const auto& actions : schedule.ranks) out << cell(i < actions.size() ? actions[i].str() : "");
    out << "\n";
  }
  return out.str();
}

std::string to_svg(const Schedule& schedule, const Timeline& timeline) {
  constexpr double kUnit = 28, kLane = 30, kLeft = 64, kTop = 40;
  const double width = kLeft + timeline.makespan * kUnit + 16;
  const double height = kTop + schedule.num_ranks * kLane + 16;
  auto colour = [](ActionType type) {
    switch (type) {
      case ActionType::Forward: return "#7aa6d6";
      case ActionType::Backward: return "#e39c5a";
      case ActionType::BackwardInput: return "#e3c25a";
      case ActionType::BackwardWeight: return "#8cc084";
      default: return "#cccccc";
    }
  };
  std::ostringstream out;
  char number[32];
  auto fmt = [&](double x) {
    std::snprintf(number, sizeof number, "%.1f", x);
    return std::string(number);
  };
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt(width) << "\" height=\"" << fmt(height)
      << "\" font-family=\"monospace\" font-size=\"11\">\n";
  std::snprintf(number, sizeof number, "%.3f", timeline.bubble_fraction);
  out << "<text x=\"4\" y=\"16\">" << schedule.name << ": " << schedule.num_ranks << " ranks, "
      << schedule.num_stages << " stages, " << schedule.num_micro_batches << " micro-batches, bubble " << number
      << " (F, B, I, W: stage s micro-batch m as s.m)</text>\n";
  for (int r = 0; r < schedule.num_ranks; ++r)
    out << "<text x=\"4\" y=\"" << fmt(kTop + r * kLane + 18) << "\">rank " << r << "</text>\n";
  for (const TimedAction& t : timeline.compute) {
    const double x = kLeft + t.start * kUnit, y = kTop + t.rank * kLane;
    out << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(y) << "\" width=\"" << fmt((t.end - t.start) * kUnit)
        << "\" height=\"" << fmt(kLane - 4) << "\" fill=\"" << colour(t.action.type)
        << "\" stroke=\"#333\" stroke-width=\"0.5\"/>\n";
    out << "<text x=\"" << fmt(x + 2) << "\" y=\"" << fmt(y + 17) << "\">" << action_type_name(t.action.type)
        << t.action.stage << "." << t.action.micro_batch << "</text>\n";
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace kiln::distributed::pipeline
