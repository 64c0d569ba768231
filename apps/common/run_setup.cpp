#include "apps/common/run_setup.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kiln.h"

namespace kiln::apps {

std::string output_problem(const std::string& flag, const std::string& path) {
  if (path.empty()) return "";
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return flag + " '" + path + "' is a directory";
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return flag + " '" + path + "': cannot create files beside it (" + std::strerror(errno) + ")";
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

void check_outputs(const std::vector<std::pair<std::string, std::string>>& flags_and_paths) {
  for (const auto& [flag, path] : flags_and_paths) {
    const std::string problem = output_problem(flag, path);
    KILN_CHECK(problem.empty(), problem);
  }
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void warn_if_oversubscribed(std::ostream& err, const std::string& program, int processes) {
  const int cores = available_cores();
  const int64_t threads = static_cast<int64_t>(get_num_threads()) * processes;
  if (threads <= cores) return;
  err << program << ": warning: " << processes << (processes == 1 ? " process" : " processes") << " x "
      << get_num_threads() << " threads = " << threads << " kernel threads on " << cores
      << " cores; they will wait on each other and train several times slower. Use --threads "
      << std::max(1, cores / processes) << " (or OMP_NUM_THREADS)\n"
      << std::flush;
}

void check_device_flag(const std::string& text) {
  try {
    Device device(text);
    (void)device;
  } catch (const Error&) {
    KILN_FAIL("--device: unknown device '", text, "' (expected cpu, cuda or cuda:N)");
  }
}

void RunningLossSum::add(const Tensor& loss, int64_t weight) {
  if (!sum_.defined()) sum_ = full({}, start_, {DType::Float64, loss.device()});
  const Tensor term = ops::mul(loss.detach().to(DType::Float64), static_cast<double>(weight));
  sum_ = ops::add(sum_, term);
}

double RunningLossSum::read() const { return sum_.defined() ? sum_.item<double>() : start_; }

}  // namespace kiln::apps
