// The flight recorder (Note [Flight recorder]): a ring of the last N
// operations, each with the state its Work reports.
#include "distributed/flight_recorder.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace kiln::distributed {
namespace {

TEST(FlightRecorder, KeepsTheLastEntriesOldestFirst) {
  FlightRecorder recorder(3);
  auto work = std::make_shared<ThreadWork>();
  for (int i = 1; i <= 5; ++i) {
    recorder.record("default", static_cast<uint64_t>(i), "all_reduce(float32 [" + std::to_string(i) + "], sum)",
                    work);
  }
  const std::string dump = recorder.dump();
  EXPECT_EQ(dump.find("#1 "), std::string::npos) << dump;
  EXPECT_EQ(dump.find("#2 "), std::string::npos) << dump;
  const auto p3 = dump.find("#3 group 'default' all_reduce(float32 [3], sum): running");
  const auto p4 = dump.find("#4 ");
  const auto p5 = dump.find("#5 ");
  ASSERT_NE(p3, std::string::npos) << dump;
  ASSERT_NE(p4, std::string::npos) << dump;
  ASSERT_NE(p5, std::string::npos) << dump;
  EXPECT_LT(p3, p4);
  EXPECT_LT(p4, p5);
}

TEST(FlightRecorder, StatesComeFromTheWorkOrFromWait) {
  FlightRecorder recorder(8);
  auto running = std::make_shared<ThreadWork>();
  auto finished = std::make_shared<ThreadWork>();
  auto failed = std::make_shared<ThreadWork>();
  recorder.record("g", 1, "barrier()", running);
  recorder.record("g", 2, "broadcast(int64 [2], root 0)", finished);
  recorder.record("g", 3, "all_gather(float32 [4])", failed);
  const uint64_t waited = recorder.record("g", 4, "all_reduce(float64 [1], max)", finished);
  const uint64_t timed_out = recorder.record("g", 5, "reduce(float32 [1], sum, root 1)", running);
  recorder.record("g", 0, "send(float32 [3]) to rank 1 tag 0", std::make_shared<ThreadWork>());
  finished->finish();
  failed->fail(std::make_exception_ptr(std::runtime_error("peer closed")));
  recorder.set_state(waited, RecordState::Completed);
  recorder.set_state(timed_out, RecordState::TimedOut);

  const std::string dump = recorder.dump();
  EXPECT_NE(dump.find("#1 group 'g' barrier(): running for"), std::string::npos) << dump;
  EXPECT_NE(dump.find("#2 group 'g' broadcast(int64 [2], root 0): completed (not waited on yet)"),
            std::string::npos) << dump;
  EXPECT_NE(dump.find("#3 group 'g' all_gather(float32 [4]): failed (not waited on yet)"), std::string::npos)
      << dump;
  EXPECT_NE(dump.find("#4 group 'g' all_reduce(float64 [1], max): completed after"), std::string::npos) << dump;
  EXPECT_NE(dump.find("#5 group 'g' reduce(float32 [1], sum, root 1): timed out after"), std::string::npos)
      << dump;
  EXPECT_NE(dump.find("p2p group 'g' send(float32 [3]) to rank 1 tag 0: handle dropped without wait()"),
            std::string::npos) << dump;
}

TEST(FlightRecorder, StateOfAnEntryThatLeftTheRingIsIgnored) {
  FlightRecorder recorder(2);
  auto work = std::make_shared<ThreadWork>();
  const uint64_t first = recorder.record("g", 1, "barrier()", work);
  recorder.record("g", 2, "barrier()", work);
  recorder.record("g", 3, "barrier()", work);
  recorder.set_state(first, RecordState::Failed);  // slot now holds #3
  const std::string dump = recorder.dump();
  EXPECT_EQ(dump.find("failed"), std::string::npos) << dump;
  EXPECT_NE(dump.find("#3 group 'g' barrier(): running"), std::string::npos) << dump;
}

}  // namespace
}  // namespace kiln::distributed
