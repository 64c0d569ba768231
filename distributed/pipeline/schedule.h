// Pipeline schedules as data: what each rank does, in order, written out
// before anything runs, checked, printable and simulated.
//
//   namespace pp = kiln::distributed::pipeline;
//   pp::Schedule s = pp::one_f_one_b(/*ranks=*/4, /*micro_batches=*/8);
//   pp::validate(s);                        // throws naming the rank and action
//   std::cout << pp::to_table(s);           // one column per rank
//   pp::Timeline t = pp::simulate(s);       // bubble fraction, peak micro-batches in flight
//   write_file("1f1b.svg", pp::to_svg(s, t));
//
// Note [Pipeline schedules as data]
// A pipeline cuts a model into S stages, each on a rank, and a batch into M
// micro-batches. Forward of micro-batch m crosses the stages 0..S-1; its
// backward comes back S-1..0. A schedule is the order in which every rank runs
// its stages' work, and it is where pipelines go wrong: two ranks each
// waiting to receive from the other hang until a timeout, and a rank that
// receives micro-batch 2's activations where it expected micro-batch 1's
// computes silently wrong gradients. Kiln therefore writes a schedule as a
// plain list of actions per rank and runs it only after checking it.
//
// Actions. Compute: F (forward of stage s on micro-batch m), B (its whole
// backward), or B split in two as zero-bubble schedules do: I (the gradient of
// the stage's inputs, which the previous stage waits for) and W (the
// gradient of its parameters, which nobody waits for and so can fill idle
// time). Communication: SEND_F / RECV_F move stage s's output activations to
// stage s+1, SEND_B / RECV_B move the gradient of stage s's inputs back to
// stage s-1. An action's stage names the stage whose tensors it moves:
// SEND_F(s) sends s's outputs, RECV_F(s) receives s's inputs, SEND_B(s) sends
// the gradient of s's inputs, RECV_B(s) receives the gradient of s's
// outputs. Stages on the same rank pass tensors directly, with no action.
//
// The generators below build the compute order of each rank and then insert
// the communication: a send right after the compute that produced its data,
// a receive right before the compute that needs it. That is also how the
// runtime (pipeline.h) behaves: a send is posted and never waits (isend; the
// runtime waits for all of them at the end of the step), a receive waits
// until its data has arrived. Activations and gradients travel on separate
// tags, and on each (source, destination, tag) messages arrive in the order
// they were sent.
//
// Checking (validate). Every rank's list is first checked on its own: each
// stage runs on its rank, every (stage, micro-batch) has one F and one B (or
// one I and one W), a compute comes after the data it needs (F after its
// RECV_F or the previous stage's F on this rank; B or I after F, and after
// RECV_B or the next stage's B/I; W after I), and a send after the compute
// that produced what it sends. Then the ranks are run together on paper with
// the runtime's rules: sends complete at once, a receive completes when the
// matching send has been posted. Each receive is checked against the message
// it would get (the stage and micro-batch must match), and if at some point
// every unfinished rank waits to receive, the schedule would deadlock: the
// error names each waiting rank, its action, and the rank it waits for. So a
// broken schedule fails before the first tensor is sent, not after a timeout.
//
// Timing (simulate). The same run on paper with a cost per compute action
// (by default F = 1, B = 2, I = 1, W = 1: backward costs about twice forward)
// gives each action's start and end, the makespan, the bubble fraction (idle
// time over total rank time) and each rank's peak number of micro-batches in
// flight (forwarded and not yet fully backpropagated, i.e. activations held).
// For GPipe and 1F1B the bubble is (p-1)/(m+p-1) for p ranks and m
// micro-batches; interleaving v stages per rank divides the idle time by v,
// (p-1)/(v*m+p-1); 1F1B holds at most p-r micro-batches on rank r where GPipe
// holds all m.
//
// The schedules (p ranks, m micro-batches):
// - gpipe: every rank runs all its forwards, then all its backwards
//   (GPipe, torchgpipe). Any m >= 1.
// - 1f1b: rank r runs p-1-r forwards (at most m), then alternates one
//   forward and one backward, then the remaining backwards (PipeDream-Flush,
//   Megatron's non-interleaved schedule). Any m >= 1.
// - interleaved: each rank holds v stages, stage s on rank s % p, and
//   micro-batches go through them in groups of p (Megatron's interleaved
//   1F1B). m must be a multiple of p: a partial group would leave ranks
//   waiting for micro-batches the formula never schedules.
// - zero-bubble: 1F1B with B split into I and W (ZB-H1 of Qi et al., 2023):
//   I stays on the critical path, and each W runs when its rank would
//   otherwise wait. As in 1F1B at most p-r micro-batches are between their
//   F and their I on rank r, and no rank holds activations of more than p
//   (1F1B's peak, on rank 0): later ranks use that room to delay their W.
//   Built by a greedy run on paper with F = I = W = 1. Any m >= 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::distributed::pipeline {

enum class ActionType {
  Forward,         // F
  Backward,        // B: input and weight gradients together
  BackwardInput,   // I: the gradient of the stage's inputs only
  BackwardWeight,  // W: the gradient of the stage's parameters, after I
  SendActivations, // SEND_F: stage s's outputs to stage s+1's rank
  RecvActivations, // RECV_F: stage s's inputs from stage s-1's rank
  SendGrads,       // SEND_B: the gradient of stage s's inputs to stage s-1's rank
  RecvGrads,       // RECV_B: the gradient of stage s's outputs from stage s+1's rank
};

// "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
const char* action_type_name(ActionType type);
bool is_compute(ActionType type);

struct Action {
  ActionType type;
  int stage;
  int micro_batch;

  // "F s1 m0", "SEND_B s2 m3".
  std::string str() const;
  bool operator==(const Action&) const = default;
};

struct Schedule {
  std::string name;  // "gpipe", "1f1b", "interleaved", "zero-bubble", or a user's
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  std::vector<int> stage_rank;             // stage s runs on rank stage_rank[s]
  std::vector<std::vector<Action>> ranks;  // each rank's actions, in order

  // The stages of `rank`, ascending.
  std::vector<int> stages_of(int rank) const;
};

// The built-in schedules, communication included; each is valid (validate()
// passes) for the arguments it accepts and throws kiln::Error, naming the
// schedule and the values, for the others.
Schedule gpipe(int num_ranks, int num_micro_batches);
Schedule one_f_one_b(int num_ranks, int num_micro_batches);
Schedule interleaved_1f1b(int num_ranks, int stages_per_rank, int num_micro_batches);
Schedule zero_bubble(int num_ranks, int num_micro_batches);
// By name: "gpipe", "1f1b", "interleaved" (stages_per_rank >= 2) or
// "zero-bubble"; stages_per_rank must be 1 for the others.
Schedule make_schedule(const std::string& name, int num_ranks, int num_micro_batches, int stages_per_rank = 1);
// The names make_schedule accepts, for messages and --help.
const std::vector<std::string>& schedule_names();

// A schedule from compute orders alone: compute[r] is rank r's F/B/I/W
// actions in order; the sends and receives are inserted as described in the
// Note. For writing one's own schedule; it is not validated here.
Schedule with_communication(std::string name, int num_micro_batches, std::vector<int> stage_rank,
                            const std::vector<std::vector<Action>>& compute);

// Throws kiln::Error naming the schedule, the rank, the action's index and
// the action when the schedule is malformed or would deadlock (Note
// [Pipeline schedules as data]).
void validate(const Schedule& schedule);

struct ActionCosts {
  double forward = 1.0;
  double backward = 2.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
};

// One compute action's place in time.
struct TimedAction {
  int rank;
  Action action;
  double start;
  double end;
};

struct Timeline {
  std::vector<TimedAction> compute;  // every F/B/I/W, in no particular order
  double makespan = 0;               // when the last rank finishes
  double busy = 0;                   // total compute time over all ranks
  double bubble_fraction = 0;        // 1 - busy / (num_ranks * makespan)
  std::vector<int> peak_in_flight;   // per rank: most micro-batches holding activations at once
};

// Runs a valid schedule on paper (validate() first; an invalid one throws as
// validate does).
Timeline simulate(const Schedule& schedule, const ActionCosts& costs = {});
// The same with costs per stage (stage_costs[s] for stage s, one per
// stage): with the durations a run measured (StepTimes::stage_costs), what
// a runtime that loses no time between actions would take on those stages,
// unequal ones included. The measured step less this makespan is the
// runtime's own cost: transfers, waking threads, the step's exchanges.
Timeline simulate(const Schedule& schedule, const std::vector<ActionCosts>& stage_costs);

// The formula for the bubble fraction of the built-in schedules, for
// comparison with simulate() and with measurement: (p-1)/(m+p-1) for gpipe,
// 1f1b and zero-bubble (whose W-filling makes the true bubble smaller; the
// formula is its upper bound), (p-1)/(v*m+p-1) for interleaved.
double bubble_formula(const Schedule& schedule);

// One row per step, one column per rank; actions shorter ranks lack are blank.
std::string to_table(const Schedule& schedule);
// The timeline as an SVG picture: one lane per rank, one box per compute
// action labelled with its micro-batch, coloured by type.
std::string to_svg(const Schedule& schedule, const Timeline& timeline);

}  // namespace kiln::distributed::pipeline
