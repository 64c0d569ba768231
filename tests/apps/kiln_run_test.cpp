// kiln-run as a program: the environment its processes get, their output,
// failures, signals, two nodes on one machine and the store it serves. The
// processes are small shell scripts; every run is bounded (kiln_run_process.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "apps/kiln-run/child_process.h"
#include "apps/kiln-run/plan.h"
#include "distributed/tcp_store.h"
#include "tensor/error.h"
#include "kiln_run_process.h"

namespace kiln::apps::run {
namespace {

using namespace testing;

// `sh -c SCRIPT`, what most tests run under kiln-run.
std::vector<std::string> sh(const std::string& script) { return {"sh", "-c", script}; }

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(KilnRun, GivesEachProcessTorchrunsEnvironment) {
  const RunResult r = run_kiln_run(
      concat({"--nproc-per-node", "3", "--master-port", "0"},
             sh("echo \"RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
                "GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE MASTER_ADDR=$MASTER_ADDR "
                "MASTER_PORT=$MASTER_PORT OMP_NUM_THREADS=$OMP_NUM_THREADS "
                "SERVED=$KILN_STORE_SERVED_BY_LAUNCHER\"")),
      5s, {{"OMP_NUM_THREADS", std::nullopt}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int port = printed_store_port(r.err);
  ASSERT_NE(port, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string expected = "[rank " + std::to_string(rank) + "] RANK=" + std::to_string(rank) +
                                 " LOCAL_RANK=" + std::to_string(rank) +
                                 " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 GROUP_WORLD_SIZE=1 "
                                 "MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                 std::to_string(port) + " OMP_NUM_THREADS=1 SERVED=1\n";
    EXPECT_TRUE(contains(r.out, expected)) << "missing: " << expected << "in:\n" << r.out;
  }
  EXPECT_EQ(lines_of(r.out).size(), 3u) << r.out;
  EXPECT_TRUE(contains(r.err, "kiln-run: setting OMP_NUM_THREADS=1 for each process, as 3 processes share this machine"))
      << r.err;
}

TEST(KilnRun, KeepsAnOmpNumThreadsThatIsSet) {
  const RunResult r = run_kiln_run(concat({"--nproc-per-node", "2", "--master-port", "0"},
                                          sh("echo OMP_NUM_THREADS=$OMP_NUM_THREADS")),
                                   5s, {{"OMP_NUM_THREADS", "4"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] OMP_NUM_THREADS=4\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] OMP_NUM_THREADS=4\n")) << r.out;
  EXPECT_FALSE(contains(r.err, "setting OMP_NUM_THREADS")) << r.err;
}

TEST(KilnRun, ShareCoresSplitsInOrderAndRefusesTooFewCores) {
  EXPECT_EQ(share_cores({0, 1, 2, 3, 4}, 2), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(share_cores({4, 5, 8, 9}, 4), (std::vector<std::vector<int>>{{4}, {5}, {8}, {9}}));
  EXPECT_EQ(share_cores({2, 3, 6, 7, 8, 9, 10}, 3), (std::vector<std::vector<int>>{{2, 3, 6}, {7, 8}, {9, 10}}));
  EXPECT_EQ(core_list({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(core_list({5}), "5");
  EXPECT_EQ(core_list({1, 3, 4}), "1,3-4");
  try {
    share_cores({0}, 2);
    ADD_FAILURE() << "2 processes on 1 core did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_TRUE(contains(e.message(), "2 processes would share the 1 core kiln-run may run on")) << e.message();
  }
}

TEST(KilnRun, BindCoresGivesEachProcessItsShareOfTheCores) {
  const std::vector<int> cores = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "this process may run on " << cores.size() << " core: --bind-cores needs 2";
  const std::vector<std::vector<int>> shares = share_cores(cores, 2);
  const RunResult r =
      run_kiln_run(concat({"--nproc-per-node", "2", "--master-port", "0", "--bind-cores"},
                          sh("echo \"$(grep Cpus_allowed_list /proc/self/status | cut -f2) OMP=$OMP_NUM_THREADS\"")),
                   5s, {{"OMP_NUM_THREADS", std::nullopt}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int>& share = shares[static_cast<size_t>(rank)];
    const std::string expected = "[rank " + std::to_string(rank) + "] " + core_list(share) +
                                 " OMP=" + std::to_string(share.size()) + "\n";
    EXPECT_TRUE(contains(r.out, expected)) << "missing: " << expected << "in:\n" << r.out;
  }
  EXPECT_TRUE(contains(r.err, "kiln-run: binding each process to its cores (--bind-cores): rank 0: " +
                                  core_list(shares[0]) + "; rank 1: " + core_list(shares[1])))
      << r.err;
  // More processes than cores is a usage error, before anything starts.
  const std::string too_many = std::to_string(cores.size() + 1);
  const RunResult refused =
      run_kiln_run({"--nproc-per-node", too_many, "--master-port", "0", "--bind-cores", "true"}, 5s);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_TRUE(contains(refused.err, "kiln-run: --bind-cores gives each process at least one core, but " + too_many +
                                        " processes would share the " + std::to_string(cores.size()) + " cores"))
      << refused.err;
  EXPECT_EQ(refused.out, "");
}

TEST(KilnRun, TimeoutFlagsReachEveryProcess) {
  const std::vector<std::string> print = sh("echo T=$KILN_DISTRIBUTED_TIMEOUT H=$KILN_HEARTBEAT_TIMEOUT");
  const RunResult given = run_kiln_run(
      concat({"--nproc-per-node", "2", "--master-port", "0", "--timeout", "2.5", "--heartbeat-timeout", "7"}, print),
      5s, {{"KILN_DISTRIBUTED_TIMEOUT", "99"}, {"KILN_HEARTBEAT_TIMEOUT", std::nullopt}});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_TRUE(contains(given.out, "[rank 0] T=2.5 H=7\n")) << given.out;
  EXPECT_TRUE(contains(given.out, "[rank 1] T=2.5 H=7\n")) << given.out;
  // Without the flags the processes keep what kiln-run was given.
  const RunResult inherited = run_kiln_run(concat({"--master-port", "0"}, print), 5s,
                                           {{"KILN_DISTRIBUTED_TIMEOUT", "99"}, {"KILN_HEARTBEAT_TIMEOUT", std::nullopt}});
  ASSERT_EQ(inherited.exit_code, 0) << inherited.err;
  EXPECT_EQ(inherited.out, "[rank 0] T=99 H=\n");
}

TEST(KilnRun, PrefixesWholeLinesAndKeepsStdoutAndStderrApart) {
  // A line written in two pieces, a line on stderr, and a last line without
  // a newline.
  const RunResult r = run_kiln_run(concat({"--nproc-per-node", "2", "--master-port", "0"},
                                          sh("printf 'hel'; sleep 0.1; printf 'lo %s\\n' $RANK; "
                                             "echo \"oops $RANK\" >&2; printf 'no newline %s' $RANK")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string rank : {"0", "1"}) {
    const std::string prefix = "[rank " + rank + "] ";
    EXPECT_TRUE(contains(r.out, prefix + "hello " + rank + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, prefix + "no newline " + rank + "\n")) << r.out;
    EXPECT_TRUE(contains(r.err, prefix + "oops " + rank + "\n")) << r.err;
  }
  EXPECT_FALSE(contains(r.out, "oops")) << r.out;
  EXPECT_FALSE(contains(r.err, "hello")) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 4u) << r.out;
}

TEST(KilnRun, LinesOfProcessesWritingAtOnceStayWhole) {
  // Three processes write 300 long lines each as fast as they can; every
  // line must arrive whole, once, under its own rank.
  const RunResult r = run_kiln_run(concat({"--nproc-per-node", "3", "--master-port", "0"},
                                          sh("i=0; while [ $i -lt 300 ]; do echo \"r$RANK line $i "
                                             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                             "\"; i=$((i+1)); done")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex line("\\[rank ([0-2])\\] r\\1 line ([0-9]+) x{80}");
  std::set<std::pair<int, int>> seen;
  for (const std::string& l : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << "a broken line: '" << l << "'";
    EXPECT_TRUE(seen.emplace(std::stoi(m[1]), std::stoi(m[2])).second) << "twice: " << l;
  }
  EXPECT_EQ(seen.size(), 900u);
}

TEST(KilnRun, AFailingRankStopsTheOthersAndIsNamed) {
  const RunResult r = run_kiln_run(concat({"--nproc-per-node", "3", "--master-port", "0"},
                                          sh("if [ $RANK = 1 ]; then echo first; echo second >&2; sleep 0.2; "
                                             "exit 3; fi; echo waiting; sleep 30")),
                                   10s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(r.seconds, 3.0) << "the sleeping ranks were not stopped";
  EXPECT_TRUE(contains(r.err, "kiln-run: rank 1 exited with status 3; sending SIGTERM to the other 2 processes\n"))
      << r.err;
  const std::regex report(
      "kiln-run: rank 1 \\(local rank 1, pid [0-9]+\\) exited with status 3; its last lines of output:\n"
      "  first\n  second\n$");
  EXPECT_TRUE(std::regex_search(r.err, report)) << r.err;
}

TEST(KilnRun, ARankKilledBySigkillIsReportedWithTheSignal) {
  const RunResult r = run_kiln_run(concat({"--nproc-per-node", "2", "--master-port", "0"},
                                          sh("if [ $RANK = 0 ]; then echo bye; kill -9 $$; fi; sleep 30")),
                                   10s);
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 3.0);
  const std::regex report(
      "kiln-run: rank 0 \\(local rank 0, pid [0-9]+\\) was killed by signal 9 \\(SIGKILL\\); its last lines of "
      "output:\n  bye\n$");
  EXPECT_TRUE(std::regex_search(r.err, report)) << r.err;
}

TEST(KilnRun, ARankThatIgnoresSigtermGetsSigkillAfterTheTermTimeout) {
  // The shell and its sleep both ignore SIGTERM (an ignored signal stays
  // ignored across exec).
  const RunResult r =
      run_kiln_run(concat({"--nproc-per-node", "2", "--master-port", "0", "--term-timeout", "0.5"},
                          sh("trap '' TERM; if [ $RANK = 1 ]; then sleep 0.2; exit 4; fi; sleep 30")),
                   10s);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_GT(r.seconds, 0.6);
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_TRUE(contains(r.err, "kiln-run: rank 0 still running 0.5 s after SIGTERM; sending SIGKILL\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with status 4; it printed nothing\n")) << r.err;
}

TEST(KilnRun, PassesItsOwnSigtermOnAndExitsWith143) {
  Process p(kiln_run_argv(concat({"--nproc-per-node", "2", "--master-port", "0"}, sh("echo up; sleep 30"))));
  ASSERT_TRUE(p.read_until([&] { return contains(p.out(), "[rank 0] up") && contains(p.out(), "[rank 1] up"); }, 5s))
      << p.out() << p.err();
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(3s)) << "kiln-run did not exit after SIGTERM: " << p.err();
  EXPECT_EQ(p.exit_code(), 128 + SIGTERM);
  EXPECT_TRUE(contains(p.err(), "kiln-run: got SIGTERM; passing it on to 2 processes")) << p.err();
}

TEST(KilnRun, ASecondSigintKillsAtOnce) {
  // The processes ignore SIGINT; the default grace would be 5 s.
  Process p(kiln_run_argv(concat({"--nproc-per-node", "2", "--master-port", "0"},
                                 sh("trap '' INT; echo up; sleep 30"))));
  ASSERT_TRUE(p.read_until([&] { return contains(p.out(), "[rank 0] up") && contains(p.out(), "[rank 1] up"); }, 5s))
      << p.out() << p.err();
  p.signal(SIGINT);
  ASSERT_TRUE(p.read_until([&] { return contains(p.err(), "got SIGINT; passing it on"); }, 3s)) << p.err();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait(2s)) << p.err();
  EXPECT_EQ(p.exit_code(), 128 + SIGINT);
  EXPECT_LT(p.seconds(), 4.0);
  EXPECT_TRUE(contains(p.err(), "kiln-run: got SIGINT again; sending SIGKILL\n")) << p.err();
}

TEST(KilnRun, AProgramThatCannotRunIsNamed) {
  RunResult r = run_kiln_run({"--master-port", "0", "/nonexistent/train"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(contains(r.err, "kiln-run: cannot execute '/nonexistent/train' (rank 0): No such file or directory\n"))
      << r.err;

  r = run_kiln_run({"--master-port", "0", "kiln-no-such-program"}, 5s, {{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(contains(r.err, "kiln-run: cannot execute 'kiln-no-such-program': no such program in PATH\n")) << r.err;

  const std::string script = ::testing::TempDir() + "kiln_run_not_executable.sh";
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  ::chmod(script.c_str(), 0644);
  r = run_kiln_run({"--nproc-per-node", "2", "--master-port", "0", script});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_TRUE(contains(r.err, "kiln-run: cannot execute '" + script + "' (rank 0): Permission denied\n")) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(KilnRun, BadFlagsExitWith2AndSayWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", "true"}, "kiln-run: --nproc-per-node must be at least 1, got 0\n"},
      {{"--nnodes", "2", "--node-rank", "2", "true"},
       "kiln-run: --node-rank 2 is not below --nnodes 2 (node ranks go from 0 to 1)\n"},
      {{"--nproc-per-node", "2"}, "kiln-run: no program to run: give it after the flags"},
      {{"--bogus", "true"}, "kiln-run: unknown flag '--bogus' (kiln-run --help lists the flags"},
      {{"--nproc-per-node", "two", "true"}, "--nproc-per-node"},
      {{"--timeout", "0", "true"}, "kiln-run: --timeout must be a number of seconds, more than 0 and at most a week, got 0\n"},
      {{"--timeout", "inf", "true"}, "kiln-run: --timeout must be a number of seconds, more than 0 and at most a week, got inf\n"},
      {{"--heartbeat-timeout", "-1", "true"},
       "kiln-run: --heartbeat-timeout must be a number of seconds, more than 0 and at most a week, got -1\n"},
      {{"--timeout", "soon", "true"}, "--timeout"},
      {{"--nnodes", "2", "--master-port", "1234", "true"},
       "kiln-run: --nnodes 2 needs the address of node 0, where the store runs: give --master-addr"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult r = run_kiln_run(args, 5s, {{"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", std::nullopt}});
    EXPECT_EQ(r.exit_code, 2) << args.front() << ": " << r.err;
    EXPECT_TRUE(contains(r.err, message)) << "expected '" << message << "' in: " << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(KilnRun, HelpDocumentsEveryFlag) {
  const RunResult r = run_kiln_run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const std::string flag : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                 "--standalone", "--term-timeout", "--timeout", "--heartbeat-timeout", "--bind-cores",
                                 "KILN_DISTRIBUTED_TIMEOUT", "KILN_HEARTBEAT_TIMEOUT", "KILN_GLOO_SOCKET_IFNAME",
                                 "KILN_STORE_SERVED_BY_LAUNCHER", "PROGRAM [ARGS...]"}) {
    EXPECT_TRUE(contains(r.out, flag)) << flag << " missing from:\n" << r.out;
  }
}

const std::vector<std::string> kPrintRank = {"sh", "-c", "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK"};

TEST(KilnRun, TwoNodesOnOneMachineMakeOneJob) {
  const auto nodes = run_two_nodes(2, kPrintRank);
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].err;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].err;
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    const std::string line = "[rank " + std::to_string(rank) + "] RANK=" + std::to_string(rank) +
                             " WORLD_SIZE=4 GROUP_RANK=" + std::to_string(node) + "\n";
    EXPECT_TRUE(contains(nodes[static_cast<size_t>(node)].out, line)) << line << "in:\n" << nodes[node].out;
  }
  EXPECT_EQ(printed_store_port(nodes[1].err), 0) << "node 1 serves nothing: " << nodes[1].err;
}

TEST(KilnRun, MpirunVariablesMakeEachTaskANode) {
  // What `mpirun -np 2 kiln-run --nproc-per-node 2` gives each kiln-run,
  // with node 0's free port passed to node 1 as mpirun's -x would.
  Process node0(kiln_run_argv(concat({"--nproc-per-node", "2", "--master-port", "0"}, kPrintRank)),
                {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
  ASSERT_TRUE(node0.read_until([&] { return printed_store_port(node0.err()) != 0; }, 5s)) << node0.err();
  Process node1(kiln_run_argv(concat({"--nproc-per-node", "2"}, kPrintRank)),
                {{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", std::to_string(printed_store_port(node0.err()))}});
  ASSERT_TRUE(node1.wait(5s));
  ASSERT_TRUE(node0.wait(5s));
  EXPECT_EQ(node0.exit_code(), 0) << node0.err();
  EXPECT_EQ(node1.exit_code(), 0) << node1.err();
  EXPECT_TRUE(contains(node0.out(), "[rank 1] RANK=1 WORLD_SIZE=4 GROUP_RANK=0\n")) << node0.out();
  EXPECT_TRUE(contains(node1.out(), "[rank 2] RANK=2 WORLD_SIZE=4 GROUP_RANK=1\n")) << node1.out();
  EXPECT_TRUE(contains(node1.out(), "[rank 3] RANK=3 WORLD_SIZE=4 GROUP_RANK=1\n")) << node1.out();
  EXPECT_TRUE(contains(node1.err(), "kiln-run: started by mpirun (Open MPI) as task 1 of 2: node rank 1 of 2 nodes\n"))
      << node1.err();
}

TEST(KilnRun, ServesTheStoreWhileItsProcessesRun) {
  Process p(kiln_run_argv(concat({"--master-port", "0"}, sh("echo up; sleep 30"))));
  ASSERT_TRUE(p.read_until([&] { return contains(p.out(), "[rank 0] up"); }, 5s)) << p.err();
  const int port = printed_store_port(p.err());
  ASSERT_NE(port, 0) << p.err();
  distributed::TCPStore writer("127.0.0.1", static_cast<uint16_t>(port), 2s);
  distributed::TCPStore reader("127.0.0.1", static_cast<uint16_t>(port), 2s);
  writer.set("rank1/addr", std::string("10.0.0.2:5001"));
  EXPECT_EQ(reader.get_string("rank1/addr"), "10.0.0.2:5001");
  EXPECT_EQ(reader.add("joined", 1), 1);
  EXPECT_EQ(writer.add("joined", 1), 2);
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(3s)) << p.err();
  EXPECT_EQ(p.exit_code(), 128 + SIGTERM);
}

TEST(KilnRun, ReportsAPortThatIsTaken) {
  Process first(kiln_run_argv(concat({"--master-port", "0"}, sh("echo up; sleep 30"))));
  ASSERT_TRUE(first.read_until([&] { return contains(first.out(), "[rank 0] up"); }, 5s)) << first.err();
  const std::string port = std::to_string(printed_store_port(first.err()));
  const RunResult r = run_kiln_run({"--master-port", port, "true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "kiln-run: node 0 serves the store on --master-port " + port +
                                  ", but tcp store: cannot listen on 127.0.0.1:" + port))
      << r.err;
  EXPECT_TRUE(contains(r.err, "--master-port 0 picks a free one")) << r.err;
}

}  // namespace
}  // namespace kiln::apps::run
