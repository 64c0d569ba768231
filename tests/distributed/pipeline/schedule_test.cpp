// Pipeline schedules: the built-in ones are valid for every size they accept,
// their simulated bubble and memory match the formulas, and the validator
// names what is wrong with broken ones instead of letting them hang.
#include "distributed/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "tests/distributed/store_test_util.h"

namespace kiln::distributed::pipeline {
namespace {

using T = ActionType;

Action act(ActionType type, int stage, int micro_batch) { return Action{type, stage, micro_batch}; }

// The message of the kiln::Error that validate(s) throws, or "<no error>".
std::string validation_error(const Schedule& s) {
  return testing::error_of([&] { validate(s); });
}

TEST(PipelineSchedule, BuiltInSchedulesAreValidForEverySizeTheyAccept) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 3 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      EXPECT_NO_THROW(validate(gpipe(p, m)));
      EXPECT_NO_THROW(validate(one_f_one_b(p, m)));
      EXPECT_NO_THROW(validate(zero_bubble(p, m)));
      for (int v = 2; v <= 3; ++v)
        if (m % p == 0) {
          EXPECT_NO_THROW(validate(interleaved_1f1b(p, v, m))) << "v=" << v;
        }
    }
  }
}

TEST(PipelineSchedule, OneFOneBOnTwoRanksIsTheHandWrittenOrder) {
  const Schedule s = one_f_one_b(2, 3);
  const std::vector<Action> rank0 = {
      act(T::Forward, 0, 0),  act(T::SendActivations, 0, 0), act(T::Forward, 0, 1), act(T::SendActivations, 0, 1),
      act(T::RecvGrads, 0, 0), act(T::Backward, 0, 0),        act(T::Forward, 0, 2), act(T::SendActivations, 0, 2),
      act(T::RecvGrads, 0, 1), act(T::Backward, 0, 1),        act(T::RecvGrads, 0, 2), act(T::Backward, 0, 2)};
  const std::vector<Action> rank1 = {
      act(T::RecvActivations, 1, 0), act(T::Forward, 1, 0), act(T::Backward, 1, 0), act(T::SendGrads, 1, 0),
      act(T::RecvActivations, 1, 1), act(T::Forward, 1, 1), act(T::Backward, 1, 1), act(T::SendGrads, 1, 1),
      act(T::RecvActivations, 1, 2), act(T::Forward, 1, 2), act(T::Backward, 1, 2), act(T::SendGrads, 1, 2)};
  EXPECT_EQ(s.ranks[0], rank0);
  EXPECT_EQ(s.ranks[1], rank1);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1}));
}

TEST(PipelineSchedule, InterleavedPlacesStagesRoundRobinAndRunsMegatronsOrder) {
  const Schedule s = interleaved_1f1b(2, 2, 2);
  EXPECT_EQ(s.num_stages, 4);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(s.stages_of(1), (std::vector<int>{1, 3}));
  // Rank 1 warms up with (2-1-1)*2 + (2-1)*2 = 2 forwards: both micro-batches
  // through its first stage; then its later stage's forwards alternate with
  // backwards, the last stage first.
  std::vector<Action> compute;
  for (const Action& a : s.ranks[1])
    if (is_compute(a.type)) compute.push_back(a);
  const std::vector<Action> expected = {act(T::Forward, 1, 0),  act(T::Forward, 1, 1),  act(T::Forward, 3, 0),
                                        act(T::Backward, 3, 0), act(T::Forward, 3, 1), act(T::Backward, 3, 1),
                                        act(T::Backward, 1, 0), act(T::Backward, 1, 1)};
  EXPECT_EQ(compute, expected);
}

TEST(PipelineSchedule, SimulatedBubbleOfGPipeAndOneFOneBIsTheFormula) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 3 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const double formula = double(p - 1) / (m + p - 1);
      for (const Schedule& s : {gpipe(p, m), one_f_one_b(p, m)}) {
        const Timeline t = simulate(s);
        EXPECT_NEAR(t.bubble_fraction, formula, 1e-12) << s.name;
        EXPECT_DOUBLE_EQ(bubble_formula(s), formula);
        // Every rank runs m forwards (1) and m backwards (2).
        EXPECT_DOUBLE_EQ(t.busy, 3.0 * m * p);
        EXPECT_DOUBLE_EQ(t.makespan, 3.0 * (m + p - 1));
      }
    }
  }
}

TEST(PipelineSchedule, InterleavingDividesTheBubbleByTheStagesPerRank) {
  for (int p = 2; p <= 4; ++p) {
    for (int v = 2; v <= 3; ++v) {
      for (int m = p; m <= 3 * p; m += p) {
        SCOPED_TRACE(::testing::Message() << "p=" << p << " v=" << v << " m=" << m);
        const Schedule s = interleaved_1f1b(p, v, m);
        const Timeline t = simulate(s);
        const double formula = double(p - 1) / (v * m + p - 1);
        EXPECT_DOUBLE_EQ(bubble_formula(s), formula);
        // Megatron's order reaches the formula when m is a multiple of p.
        EXPECT_NEAR(t.bubble_fraction, formula, 1e-12);
        // And it is smaller than 1F1B's on the same ranks.
        EXPECT_LT(t.bubble_fraction, simulate(one_f_one_b(p, m)).bubble_fraction);
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMinusRMicroBatchesWhereGPipeHoldsAll) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 3 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const Timeline g = simulate(gpipe(p, m)), o = simulate(one_f_one_b(p, m)), z = simulate(zero_bubble(p, m));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(g.peak_in_flight[r], m);
        EXPECT_EQ(o.peak_in_flight[r], std::min(p - r, m));
        // Zero-bubble delays W on later ranks, within 1F1B's peak (rank 0's).
        EXPECT_LE(z.peak_in_flight[r], std::min(p, m));
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleFillsIdleTimeWithWeightGradients) {
  for (int p = 2; p <= 4; ++p) {
    for (int m = p; m <= 3 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const Schedule s = zero_bubble(p, m);
      // With I = W = 1 a backward costs 2, as in 1F1B's costs.
      const double zb = simulate(s).bubble_fraction, one = simulate(one_f_one_b(p, m)).bubble_fraction;
      EXPECT_LT(zb, one);
      EXPECT_LE(zb, bubble_formula(s) + 1e-12);
      int weights = 0;
      for (const auto& actions : s.ranks)
        for (const Action& a : actions) weights += a.type == T::BackwardWeight;
      EXPECT_EQ(weights, p * m);
    }
  }
}

TEST(PipelineSchedule, PerStageCostsSimulateUnequalStages) {
  // GPipe, 2 ranks, 2 micro-batches; stage 1 takes twice stage 0's time
  // (F 2, B 4 against F 1, B 2). By hand: rank 0 runs F F in [0, 2]; rank 1
  // its F's in [1, 3] and [3, 5], its B's in [5, 9] and [9, 13]; rank 0
  // each B after the matching one of rank 1's, the last in [13, 15]. Busy
  // 6 + 12 of 2 x 15.
  const Schedule s = gpipe(2, 2);
  const Timeline t = simulate(s, std::vector<ActionCosts>{{1, 2, 1, 1}, {2, 4, 2, 2}});
  EXPECT_DOUBLE_EQ(t.makespan, 15.0);
  EXPECT_DOUBLE_EQ(t.busy, 18.0);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 1.0 - 18.0 / 30.0);
  // Equal costs per stage are the one-cost simulation.
  for (const Schedule& each : {one_f_one_b(4, 8), interleaved_1f1b(2, 2, 4), zero_bubble(3, 6)}) {
    const ActionCosts costs{1.5, 2.5, 1.25, 1.25};
    const Timeline one = simulate(each, costs);
    const Timeline per = simulate(each, std::vector<ActionCosts>(static_cast<size_t>(each.num_stages), costs));
    EXPECT_DOUBLE_EQ(per.makespan, one.makespan) << each.name;
    EXPECT_DOUBLE_EQ(per.bubble_fraction, one.bubble_fraction) << each.name;
  }
  // One cost per stage, no more and no fewer.
  EXPECT_THROW(
      {
        try {
          simulate(s, std::vector<ActionCosts>(3));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("costs for 3 stages but the schedule has 2"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST(PipelineSchedule, FewerMicroBatchesThanStagesRunsInsteadOfHanging) {
  for (const Schedule& s : {gpipe(4, 1), one_f_one_b(4, 2)}) {
    EXPECT_NO_THROW(validate(s)) << s.name;
    EXPECT_NEAR(simulate(s).bubble_fraction, bubble_formula(s), 1e-12) << s.name;
  }
  // Zero-bubble fills part of the same bubble with weight gradients.
  const Schedule zb = zero_bubble(4, 3);
  EXPECT_NO_THROW(validate(zb));
  EXPECT_LT(simulate(zb).bubble_fraction, bubble_formula(zb));
}

// Two ranks, one micro-batch: the smallest pipeline, written by hand.
Schedule two_rank_schedule(std::vector<Action> rank0, std::vector<Action> rank1, int micro_batches = 1) {
  Schedule s;
  s.name = "hand-written";
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_micro_batches = micro_batches;
  s.stage_rank = {0, 1};
  s.ranks = {std::move(rank0), std::move(rank1)};
  return s;
}

TEST(PipelineSchedule, BothRanksReceivingFirstIsADeadlockNamingBoth) {
  const Schedule s = two_rank_schedule(
      {act(T::RecvGrads, 0, 0), act(T::Forward, 0, 0), act(T::SendActivations, 0, 0), act(T::Backward, 0, 0)},
      {act(T::RecvActivations, 1, 0), act(T::Forward, 1, 0), act(T::Backward, 1, 0), act(T::SendGrads, 1, 0)});
  const std::string e = validation_error(s);
  EXPECT_NE(e.find("would deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0 waits at action 0 (RECV_B s0 m0) for rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 waits at action 0 (RECV_F s1 m0) for rank 0"), std::string::npos) << e;
  EXPECT_THROW(simulate(s), Error);
}

TEST(PipelineSchedule, BothRanksSendingFirstIsCaughtBeforeAnythingIsSent) {
  // Rank 1 sends its gradient before it has run backward (and so before it
  // has even received its input): the check of its own list catches it.
  const Schedule s = two_rank_schedule(
      {act(T::SendActivations, 0, 0), act(T::Forward, 0, 0), act(T::RecvGrads, 0, 0), act(T::Backward, 0, 0)},
      {act(T::SendGrads, 1, 0), act(T::RecvActivations, 1, 0), act(T::Forward, 1, 0), act(T::Backward, 1, 0)});
  const std::string e = validation_error(s);
  EXPECT_NE(e.find("rank 0, action 0 (SEND_F s0 m0): sends activations that F s0 m0 has not computed yet"),
            std::string::npos)
      << e;
  Schedule rank1_only = s;
  rank1_only.ranks[0] = one_f_one_b(2, 1).ranks[0];
  const std::string e1 = validation_error(rank1_only);
  EXPECT_NE(e1.find("rank 1, action 0 (SEND_B s1 m0): sends a gradient that B (or I) s1 m0 has not computed yet"),
            std::string::npos)
      << e1;
}

TEST(PipelineSchedule, ReceivingMicroBatchesOutOfOrderIsAMismatchNotWrongGradients) {
  // Rank 0 sends micro-batch 0 then 1; rank 1 runs 1 first.
  Schedule s = gpipe(2, 2);
  std::vector<Action> rank1 = {act(T::RecvActivations, 1, 1), act(T::Forward, 1, 1),
                               act(T::RecvActivations, 1, 0), act(T::Forward, 1, 0),
                               act(T::Backward, 1, 0),        act(T::SendGrads, 1, 0),
                               act(T::Backward, 1, 1),        act(T::SendGrads, 1, 1)};
  s.ranks[1] = rank1;
  const std::string e = validation_error(s);
  EXPECT_NE(e.find("rank 1, action 0 (RECV_F s1 m1): would receive what rank 0 sent at action 1 (SEND_F s0 m0)"),
            std::string::npos)
      << e;
}

TEST(PipelineSchedule, MalformedListsAreRejectedNamingTheRankAndAction) {
  struct Case {
    const char* what;
    std::function<void(Schedule&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"missing backward", [](Schedule& s) { s.ranks[1].pop_back(), s.ranks[1].pop_back(); },
       "rank 1 never runs B (or I) s1 m0"},
      {"stage on the wrong rank", [](Schedule& s) { s.ranks[0][0].stage = 1; },
       "rank 0, action 0 (F s1 m0): stage 1 runs on rank 1, not on rank 0"},
      {"micro-batch out of range", [](Schedule& s) { s.ranks[0][0].micro_batch = 5; },
       "micro-batch 5 is outside 0..0"},
      {"forward twice",
       [](Schedule& s) { s.ranks[0].insert(s.ranks[0].begin() + 1, act(T::Forward, 0, 0)); },
       "rank 0, action 1 (F s0 m0): runs forward a second time"},
      {"forward before receive",
       [](Schedule& s) { std::swap(s.ranks[1][0], s.ranks[1][1]); },
       "rank 1, action 0 (F s1 m0): runs before its input is received (RECV_F s1 m0)"},
      {"no send", [](Schedule& s) { s.ranks[0].erase(s.ranks[0].begin() + 1); },
       "rank 0 never sends the activations of F s0 m0"},
      {"send from the last stage",
       [](Schedule& s) { s.ranks[1].push_back(act(T::SendActivations, 1, 0)); },
       "the last stage has no next stage to send to"},
      {"I without W", [](Schedule& s) { s.ranks[1][2].type = T::BackwardInput; },
       "rank 1 runs I s1 m0 but never W s1 m0"},
      {"W before I",
       [](Schedule& s) { s.ranks[1].insert(s.ranks[1].begin() + 2, act(T::BackwardWeight, 1, 0)); },
       "rank 1, action 2 (W s1 m0): runs before I s1 m0"},
      {"rank without a stage", [](Schedule& s) { s.stage_rank = {0, 0}; }, "rank 1 holds no stage"},
  };
  for (const Case& c : cases) {
    Schedule s = gpipe(2, 1);
    c.edit(s);
    const std::string e = validation_error(s);
    EXPECT_NE(e.find(c.message), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find("pipeline schedule 'gpipe'"), std::string::npos) << c.what << ": " << e;
  }
}

TEST(PipelineSchedule, GeneratorsRejectWhatTheyCannotSchedule) {
  EXPECT_NE(testing::error_of([] { interleaved_1f1b(4, 2, 6); })
                .find("the number of micro-batches (6) must be a multiple of the number of ranks (4)"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { gpipe(2, 0); }).find("the number of micro-batches must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { one_f_one_b(0, 4); }).find("the number of ranks must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make_schedule("pipedream", 2, 4); }).find("unknown schedule 'pipedream'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make_schedule("1f1b", 2, 4, 2); }).find("runs one stage per rank"), std::string::npos);
  EXPECT_NE(testing::error_of([] { make_schedule("interleaved", 2, 4, 1); }).find("needs at least 2 stages per rank"),
            std::string::npos);
  EXPECT_EQ(make_schedule("interleaved", 2, 4, 2).num_stages, 4);
  EXPECT_EQ(make_schedule("zero-bubble", 3, 4).name, "zero-bubble");
}

TEST(PipelineSchedule, TableAndPictureShowEveryAction) {
  const Schedule s = one_f_one_b(2, 2);
  const std::string table = to_table(s);
  EXPECT_NE(table.find("pipeline schedule '1f1b': 2 ranks, 2 stages, 2 micro-batches"), std::string::npos);
  EXPECT_NE(table.find("rank 0"), std::string::npos);
  EXPECT_NE(table.find("RECV_B s0 m1"), std::string::npos);
  // Lines: the title, the header, one per step of the longest rank.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 8);
  const Timeline t = simulate(s);
  const std::string svg = to_svg(s, t);
  size_t rects = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++rects;
  EXPECT_EQ(rects, t.compute.size());
  EXPECT_EQ(t.compute.size(), 8u);  // 2 ranks x (2 F + 2 B)
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace kiln::distributed::pipeline
