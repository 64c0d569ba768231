// kiln-run's event loop (Note [Launcher environment] in launcher.h): one
// poll() over every process's two pipes and a pipe that kiln-run's own
// signal handlers write to, so that output, exits and signals are handled
// in one place, in order, on one thread.
#include "apps/kiln-run/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "apps/kiln-run/child_process.h"
#include "apps/kiln-run/rank_output.h"
#include "distributed/tcp_store.h"
#include "tensor/error.h"

namespace kiln::apps::run {
namespace {

using Clock = std::chrono::steady_clock;

// The write end of SignalPipe; a handler may touch nothing else.
int g_signal_pipe = -1;

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  // A full pipe drops the byte; the loop reaps on every wake-up anyway and a
  // stop signal already waits there.
  [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe, &byte, 1);
  errno = saved;
}

constexpr std::array<int, 4> kStopSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The self-pipe: SIGCHLD and the stop signals become bytes the loop polls
// for. SIGPIPE is ignored, so that a closed stdout (kiln-run ... | head)
// loses output instead of killing kiln-run and orphaning the job. Restores
// every handler on destruction.
class SignalPipe {
 public:
  SignalPipe() {
    KILN_CHECK(::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) == 0, "cannot create the signal pipe: ", std::strerror(errno));
    g_signal_pipe = fds_[1];
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int signo : kStopSignals) install(signo, action);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    install(SIGCHLD, action);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    install(SIGPIPE, ignore);
  }
  ~SignalPipe() {
    for (const auto& [signo, old] : saved_) ::sigaction(signo, &old, nullptr);
    g_signal_pipe = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return fds_[0]; }

  // The signals that arrived since the last call, in order.
  std::vector<int> take() {
    std::vector<int> signals;
    unsigned char bytes[64];
    ssize_t got;
    while ((got = ::read(fds_[0], bytes, sizeof(bytes))) > 0) signals.insert(signals.end(), bytes, bytes + got);
    return signals;
  }

 private:
  void install(int signo, const struct sigaction& action) {
    struct sigaction old {};
    ::sigaction(signo, &action, &old);
    saved_.emplace_back(signo, old);
  }

  int fds_[2] = {-1, -1};
  std::vector<std::pair<int, struct sigaction>> saved_;
};

// Writes all of `text`, waiting when `fd` is non-blocking and full. Output
// that cannot be written (a closed pipe) is dropped: the job goes on.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return;
    }
  }
}

void say(const std::string& message) { write_all(STDERR_FILENO, "kiln-run: " + message + "\n"); }

std::string seconds_text(double seconds) {
  std::ostringstream os;
  os << seconds << " s";
  return os.str();
}

// "1 process", "3 processes".
std::string processes(int n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }

struct Child {
  Child(int local_rank_, int rank_, pid_t pid_) : local_rank(local_rank_), rank(rank_), pid(pid_), output(rank_) {}
  int local_rank;  // LOCAL_RANK
  int rank;        // RANK
  pid_t pid;
  std::array<int, 2> fds = {-1, -1};  // read ends of stdout and stderr; -1 once closed
  RankOutput output;
  bool running = true;
  int status = 0;  // from waitpid(), once it is not running
};

class Launcher {
 public:
  Launcher(const LaunchPlan& plan, const Environment& env) : plan_(plan), env_(env) {}
  int run();

 private:
  bool start(uint16_t store_port);
  void loop(SignalPipe& signals);
  void read_stream(Child& c, Stream stream);
  void close_stream(Child& c, Stream stream);
  void drain(Child& c);
  void reap();
  void handle_stop_signal(int signo);
  void stop(int signo);
  void signal_groups(int signo);
  void kill_stragglers(const std::string& why);
  int running_count() const;
  std::string running_ranks() const;
  void report_failure() const;

  const LaunchPlan& plan_;
  const Environment& env_;
  std::vector<std::unique_ptr<Child>> children_;
  bool stopping_ = false;                     // SIGTERM (or kiln-run's signal) went out
  std::optional<Clock::time_point> kill_at_;  // when the processes still running get SIGKILL
  bool killed_ = false;                       // SIGKILL went out
  // What ended the job; at most one is set, the first cause wins.
  int start_error_ = 0;     // kiln-run's exit code when the program could not be started
  int failed_ = -1;         // index in children_ of the process that failed
  int interrupted_by_ = 0;  // the signal kiln-run got
};

int Launcher::run() {
  std::unique_ptr<distributed::TCPStoreServer> store;
  uint16_t store_port = plan_.master_port;
  if (plan_.serves_store) {
    try {
      store = std::make_unique<distributed::TCPStoreServer>(plan_.store_bind_addr, plan_.master_port);
    } catch (const Error& e) {
      KILN_FAIL("node 0 serves the store on --master-port ", plan_.master_port, ", but ", e.message(),
                plan_.master_port != 0 ? " (another job on that port? --master-port 0 picks a free one)" : "");
    }
    store_port = store->port();
    // Nobody else can know a port the OS picked: the other nodes need it.
    if (plan_.master_port == 0) say("store listening on " + plan_.master_addr + ":" + std::to_string(store_port));
  }
  if (!plan_.origin.empty()) say(plan_.origin);
  if (!plan_.cores.empty()) {
    std::string shares;
    for (size_t i = 0; i < plan_.cores.size(); ++i) {
      shares += (i ? "; rank " : "rank ") + std::to_string(plan_.rank_of(static_cast<int>(i))) + ": " +
                core_list(plan_.cores[i]);
    }
    say("binding each process to its cores (--bind-cores): " + shares);
  }
  if (sets_omp_num_threads(plan_, env_)) {
    if (plan_.cores.empty()) {
      say("setting OMP_NUM_THREADS=1 for each process, as " + std::to_string(plan_.local_world_size) +
          " processes share this machine; set OMP_NUM_THREADS yourself to tune it");
    } else {
      say("setting OMP_NUM_THREADS for each process to the number of its cores; set OMP_NUM_THREADS yourself to "
          "tune it");
    }
  }

  SignalPipe signals;
  if (!start(store_port) && !children_.empty()) stop(SIGTERM);
  loop(signals);

  if (start_error_ != 0) return start_error_;
  if (failed_ >= 0) {
    report_failure();
    return exit_code_of(children_[static_cast<size_t>(failed_)]->status);
  }
  if (interrupted_by_ != 0) return 128 + interrupted_by_;
  return 0;
}

bool Launcher::start(uint16_t store_port) {
  const auto path_variable = env_.find("PATH");
  const std::optional<std::string> path =
      find_program(plan_.program, path_variable == env_.end() ? nullptr : path_variable->second.c_str());
  if (!path) {
    say("cannot execute '" + plan_.program + "': no such program in PATH");
    start_error_ = 127;
    return false;
  }
  std::vector<std::string> argv = {plan_.program};
  argv.insert(argv.end(), plan_.args.begin(), plan_.args.end());
  for (int i = 0; i < plan_.nproc_per_node; ++i) {
    const int rank = plan_.rank_of(i);
    SpawnResult started;
    try {
      started = spawn(*path, argv, child_environment(plan_, i, env_, store_port),
                      plan_.cores.empty() ? std::vector<int>{} : plan_.cores[static_cast<size_t>(i)]);
    } catch (const Error& e) {
      say(e.message() + " (rank " + std::to_string(rank) + ")");
      start_error_ = 1;
      return false;
    }
    if (started.exec_error != 0) {
      say("cannot execute '" + plan_.program + "' (rank " + std::to_string(rank) +
          "): " + std::strerror(started.exec_error));
      start_error_ = started.exec_error == ENOENT ? 127 : 126;
      return false;
    }
    auto child = std::make_unique<Child>(plan_.local_rank_base + i, rank, started.pid);
    child->fds = {started.stdout_fd, started.stderr_fd};
    children_.push_back(std::move(child));
  }
  return true;
}

void Launcher::loop(SignalPipe& signals) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, Stream>> owners;  // owners[i] reads fds[i + 1]
  while (running_count() > 0) {
    fds.assign(1, pollfd{signals.fd(), POLLIN, 0});
    owners.clear();
    for (auto& c : children_) {
      for (Stream s : {Stream::Out, Stream::Err}) {
        const int fd = c->fds[static_cast<size_t>(s)];
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(c.get(), s);
      }
    }
    int timeout_ms = -1;
    if (kill_at_ && !killed_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      KILN_FAIL("poll() over the processes' output failed: ", std::strerror(errno));
    }
    if (fds[0].revents & POLLIN) {
      for (int signo : signals.take()) {
        if (signo != SIGCHLD) handle_stop_signal(signo);
      }
    }
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(*owners[i].first, owners[i].second);
    }
    reap();
    if (kill_at_ && !killed_ && Clock::now() >= *kill_at_ && running_count() > 0) {
      kill_stragglers(running_ranks() + " still running " + seconds_text(plan_.term_timeout) + " after SIGTERM");
    }
  }
}

void Launcher::read_stream(Child& c, Stream stream) {
  char buffer[65536];
  const ssize_t got = ::read(c.fds[static_cast<size_t>(stream)], buffer, sizeof(buffer));
  if (got > 0) {
    const int fd = stream == Stream::Out ? STDOUT_FILENO : STDERR_FILENO;
    write_all(fd, c.output.feed(stream, buffer, static_cast<size_t>(got)));
  } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close_stream(c, stream);
  }
}

void Launcher::close_stream(Child& c, Stream stream) {
  int& fd = c.fds[static_cast<size_t>(stream)];
  if (fd < 0) return;
  write_all(stream == Stream::Out ? STDOUT_FILENO : STDERR_FILENO, c.output.finish(stream));
  ::close(fd);
  fd = -1;
}

// After the process exited: what it wrote is in the pipes already. A
// process it started may hold the pipes open and go on writing; kiln-run
// takes what is there now (at most a few MiB) and stops listening.
void Launcher::drain(Child& c) {
  for (Stream s : {Stream::Out, Stream::Err}) {
    for (int reads = 0; reads < 64 && c.fds[static_cast<size_t>(s)] >= 0; ++reads) {
      const int fd = c.fds[static_cast<size_t>(s)];
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      read_stream(c, s);
    }
    close_stream(c, s);
  }
}

void Launcher::reap() {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = *children_[i];
    if (!c.running) continue;
    // Look first, reap after: while the exited process is a zombie its pid
    // cannot be reused, so signalling its process group cannot hit a
    // stranger's.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) {
      continue;
    }
    const bool failed = !(info.si_code == CLD_EXITED && info.si_status == 0);
    const bool first_failure = failed && !stopping_;
    // What the failed process started may still run in its group.
    if (first_failure) ::kill(-c.pid, SIGTERM);
    while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
    }
    c.running = false;
    drain(c);
    if (!first_failure) continue;
    failed_ = static_cast<int>(i);
    const int others = running_count();
    say("rank " + std::to_string(c.rank) + " " + describe_wait_status(c.status) +
        (others > 0 ? "; sending SIGTERM to the other " + processes(others) : ""));
    stop(SIGTERM);
  }
}

void Launcher::handle_stop_signal(int signo) {
  if (stopping_) {
    if (!killed_ && running_count() > 0) kill_stragglers("got " + signal_name(signo) + " again");
    return;
  }
  interrupted_by_ = signo;
  say("got " + signal_name(signo) + "; passing it on to " + processes(running_count()) + " (SIGKILL in " +
      seconds_text(plan_.term_timeout) + "; send it again to kill them now)");
  stop(signo);
}

void Launcher::stop(int signo) {
  stopping_ = true;
  signal_groups(signo);
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan_.term_timeout));
  kill_at_ = Clock::now() + grace;
}

void Launcher::signal_groups(int signo) {
  for (const auto& c : children_) {
    if (!c->running) continue;
    // A process that made itself a new group is reached by its pid alone.
    if (::kill(-c->pid, signo) != 0) ::kill(c->pid, signo);
  }
}

void Launcher::kill_stragglers(const std::string& why) {
  say(why + "; sending SIGKILL");
  killed_ = true;
  signal_groups(SIGKILL);
}

int Launcher::running_count() const {
  int n = 0;
  for (const auto& c : children_) n += c->running ? 1 : 0;
  return n;
}

std::string Launcher::running_ranks() const {
  std::string text;
  for (const auto& c : children_) {
    if (!c->running) continue;
    text += (text.empty() ? "rank " : ", ") + std::to_string(c->rank);
  }
  return text;
}

void Launcher::report_failure() const {
  const Child& c = *children_[static_cast<size_t>(failed_)];
  std::string text = "rank " + std::to_string(c.rank) + " (local rank " + std::to_string(c.local_rank) + ", pid " +
                     std::to_string(c.pid) + ") " + describe_wait_status(c.status);
  const std::vector<std::string> tail = c.output.tail();
  if (tail.empty()) {
    text += "; it printed nothing";
  } else {
    text += "; its last lines of output:";
    for (const std::string& line : tail) text += "\n  " + line;
  }
  say(text);
}

}  // namespace

int launch(const LaunchPlan& plan, const Environment& env) { return Launcher(plan, env).run(); }

}  // namespace kiln::apps::run
