// kiln-run across hosts. Two network namespaces, each with its own host
// name and joined by a veth pair, stand for two machines: their loopbacks
// are apart and neither host name resolves, as on machines whose names DNS
// does not know. With no interface set, a 2-node DDP job must train as one
// process does (Note [Gloo interface]: each rank listens where it reaches
// the store), and a node that is missing at the rendezvous or killed while
// training must end the other within its timeout, naming the missing rank.
//
// The processes are this test binary again (KILN_HOSTS_JOB says what to
// run), as in kiln_run_job_test.cpp. Making namespaces needs root and
// iproute2 (scripts/install-deps.sh); without them the tests skip.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/init.h"
#include "kiln.h"
#include "kiln_run_process.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/sgd.h"

namespace kiln::apps::run {
namespace {

using namespace testing;
namespace F = nn::functional;

// ---- the job, in the processes kiln-run starts ----------------------------------

constexpr int kSteps = 20;
constexpr int64_t kBatch = 8;

std::shared_ptr<nn::Linear> tiny_model(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::Linear>(4, 3);
  model->to(DType::Float64);
  return model;
}

// Step `step`'s whole batch, the same in every process: x (kBatch, 4), y (kBatch).
std::pair<Tensor, Tensor> batch_for(int step) {
  Generator gen;
  gen.manual_seed(500 + static_cast<uint64_t>(step));
  return {randn({kBatch, 4}, DType::Float64, &gen), randint(0, 3, {kBatch}, DType::Int64, &gen)};
}

optim::SGDOptions sgd() { return optim::SGDOptions(0.1).momentum(0.9); }

double max_difference(nn::Module& a, nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max(abs(pa[i] - pb[i])).item<double>());
  return worst;
}

// KILN_HOSTS_JOB=train: kSteps of DDP over the job, each rank on its rows of
// the batch, then the largest difference from one process trained on the
// whole batches. =endless: steps until killed, saying so after each.
void run_job() {
  const std::string mode = std::getenv("KILN_HOSTS_JOB");
  distributed::init_process_group("gloo");  // timeouts from kiln-run's --timeout flags
  const int rank = distributed::get_rank(), world = distributed::get_world_size();
  // Each rank starts from other weights: DDP must take rank 0's.
  auto ddp = std::make_shared<distributed::DistributedDataParallel>(tiny_model(7 + rank));
  optim::SGD opt(ddp->parameters(), sgd());
  for (int s = 0; mode == "endless" || s < kSteps; ++s) {
    auto [x, y] = batch_for(s % kSteps);
    const int64_t rows = kBatch / world;
    opt.zero_grad();
    F::cross_entropy(ddp->forward(x.narrow(0, rank * rows, rows)), y.narrow(0, rank * rows, rows)).backward();
    opt.step();
    if (mode == "endless") {
      std::printf("step %d\n", s);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  auto reference = tiny_model(7);
  optim::SGD reference_opt(reference->parameters(), sgd());
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_for(s);
    reference_opt.zero_grad();
    F::cross_entropy(reference->forward(x), y).backward();
    reference_opt.step();
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::printf("rank %d of %d on %s: max |DDP - one process| = %.3g\n", rank, world, host,
              max_difference(ddp->module(), *reference));
  std::fflush(stdout);
  distributed::destroy_process_group();
}

// ---- the hosts ---------------------------------------------------------------------

// `command` through sh; its exit code, and its output in `output`.
int shell(const std::string& command, std::string* output = nullptr) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::string text;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) text.append(buffer, n);
  const int status = ::pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Two network namespaces "kiln<pid>n0" and "kiln<pid>n1" joined by a veth
// pair, 10.211.0.1 and 10.211.0.2. Made inside the namespaces, so deleting
// the namespaces (the destructor, whatever the test did) removes everything.
class TwoHosts {
 public:
  TwoHosts() {
    if (::geteuid() != 0) {
      why_not_ = "making network namespaces needs root";
      return;
    }
    if (shell("ip -V") != 0) {
      why_not_ = "no 'ip' command (iproute2; scripts/install-deps.sh installs it)";
      return;
    }
    const std::string n0 = namespace_of(0), n1 = namespace_of(1);
    for (const std::string& command :
         {"ip netns add " + n0, "ip netns add " + n1,
          "ip -n " + n0 + " link add veth0 type veth peer name veth1 netns " + n1,
          "ip -n " + n0 + " addr add " + address_of(0) + "/24 dev veth0",
          "ip -n " + n1 + " addr add " + address_of(1) + "/24 dev veth1", "ip -n " + n0 + " link set veth0 up",
          "ip -n " + n1 + " link set veth1 up", "ip -n " + n0 + " link set lo up", "ip -n " + n1 + " link set lo up"}) {
      std::string output;
      if (shell(command, &output) != 0) {
        why_not_ = "'" + command + "' failed: " + output;
        return;
      }
    }
  }
  ~TwoHosts() {
    shell("ip netns del " + namespace_of(0));
    shell("ip netns del " + namespace_of(1));
  }
  // Empty when the hosts are up; else why not (the test skips).
  const std::string& why_not() const { return why_not_; }

  std::string namespace_of(int node) const {
    return "kiln" + std::to_string(::getpid()) + "n" + std::to_string(node);
  }
  static std::string address_of(int node) { return "10.211.0." + std::to_string(node + 1); }

  // `argv` run on host `node`: in its network namespace and a UTS namespace
  // of its own named "kiln-node<node>", which resolves to nothing.
  std::vector<std::string> on_host(int node, const std::vector<std::string>& argv) const {
    std::vector<std::string> wrapped = {"/usr/sbin/ip",  "netns", "exec", namespace_of(node), "unshare", "--uts",
                                        "sh",            "-c",    "hostname \"$0\" && exec \"$@\"",
                                        "kiln-node" + std::to_string(node)};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return wrapped;
  }

 private:
  std::string why_not_;
};

std::string this_program() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// kiln-run for node `node` of 2, one process each, the store on node 0's
// veth address, running this TEST's job branch.
std::vector<std::string> node_argv(const TwoHosts& hosts, int node, const std::string& test, double timeout) {
  const std::vector<std::string> args = {"--nnodes",      "2",
                                         "--node-rank",   std::to_string(node),
                                         "--master-addr", TwoHosts::address_of(0),
                                         "--master-port", "29500",
                                         "--timeout",     std::to_string(timeout),
                                         "--heartbeat-timeout", "3",
                                         this_program(),  "--gtest_filter=KilnRunHosts." + test};
  return hosts.on_host(node, kiln_run_argv(args));
}

// Runs until both exit or `timeout` passes, reading both as they go.
void wait_both(Process& a, Process& b, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while ((a.running() || b.running()) && Clock::now() < deadline) {
    a.read_until([&] { return !a.running(); }, 50ms);
    b.read_until([&] { return !b.running(); }, 50ms);
  }
  a.wait(1s);
  b.wait(1s);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const EnvChanges kNoInterface = {{"KILN_GLOO_SOCKET_IFNAME", std::nullopt},
                                 {"GLOO_SOCKET_IFNAME", std::nullopt},
                                 {"MASTER_ADDR", std::nullopt},
                                 {"MASTER_PORT", std::nullopt}};

EnvChanges job(const std::string& mode) {
  EnvChanges env = kNoInterface;
  env["KILN_HOSTS_JOB"] = mode;
  return env;
}

TEST(KilnRunHosts, TwoNodesTrainDdpAsOneProcessWithNoInterfaceSet) {
  if (std::getenv("KILN_HOSTS_JOB")) return run_job();
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string test = "TwoNodesTrainDdpAsOneProcessWithNoInterfaceSet";
  Process node0(node_argv(hosts, 0, test, 30), job("train"));
  Process node1(node_argv(hosts, 1, test, 30), job("train"));
  wait_both(node0, node1, 60s);
  ASSERT_EQ(node0.exit_code(), 0) << node0.out() << node0.err() << node1.out() << node1.err();
  ASSERT_EQ(node1.exit_code(), 0) << node1.out() << node1.err();
  const std::regex line(R"(\[rank (\d)\] rank \d of 2 on (kiln-node\d): max \|DDP - one process\| = (\S+)\n)");
  for (int node = 0; node < 2; ++node) {
    const std::string& out = node == 0 ? node0.out() : node1.out();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, line)) << out;
    EXPECT_EQ(std::stoi(m[1]), node);
    EXPECT_EQ(m[2], "kiln-node" + std::to_string(node));
    EXPECT_LE(std::stod(m[3]), 1e-12) << out;
  }
}

TEST(KilnRunHosts, ANodeMissingAtTheRendezvousIsNamedWithinTheTimeout) {
  if (std::getenv("KILN_HOSTS_JOB")) return run_job();
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  Process node0(node_argv(hosts, 0, "ANodeMissingAtTheRendezvousIsNamedWithinTheTimeout", 3), job("train"));
  ASSERT_TRUE(node0.wait(30s)) << node0.err();
  EXPECT_NE(node0.exit_code(), 0);
  EXPECT_LT(node0.seconds(), 20.0);
  EXPECT_TRUE(contains(node0.err(), "gloo: rank 0 of group 'default' (size 2) waited 3000 ms (the rendezvous timeout) "
                                    "through tcp store at 10.211.0.1:29500 for rank 1 to post its world size"))
      << node0.err();
}

TEST(KilnRunHosts, ANodeKilledWhileTrainingEndsTheOtherNamingItsRank) {
  if (std::getenv("KILN_HOSTS_JOB")) return run_job();
  TwoHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string test = "ANodeKilledWhileTrainingEndsTheOtherNamingItsRank";
  Process node0(node_argv(hosts, 0, test, 20), job("endless"));
  Process node1(node_argv(hosts, 1, test, 20), job("endless"));
  const auto training = [&] { return contains(node1.out(), "[rank 1] step 3\n"); };
  while (!training() && node0.running() && node1.running() && node1.seconds() < 60) {
    node0.read_until([] { return false; }, 50ms);
    node1.read_until(training, 50ms);
  }
  ASSERT_TRUE(training()) << node0.err() << node1.err();
  // kiln-run dies at once; its process gets SIGTERM from the kernel
  // (PR_SET_PDEATHSIG), as when a machine's launcher is killed.
  node1.signal(SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(node0.wait(40s)) << node0.err();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 20.0);
  EXPECT_NE(node0.exit_code(), 0);
  // The rank's error (on its stdout: gtest reports the exception there)
  // names rank 1: as not having reached the collective, or, when rank 1 had
  // already sent its call for it (Note [Always-on collective agreement]),
  // as the peer whose connection broke, by node 1's address.
  const std::string out = node0.out();
  EXPECT_TRUE(contains(out, "Not reached: rank 1") ||
              (contains(out, "Connection") && contains(out, "[" + TwoHosts::address_of(1) + "]")))
      << out << node0.err();
}

}  // namespace
}  // namespace kiln::apps::run

#endif  // KILN_WITH_GLOO
