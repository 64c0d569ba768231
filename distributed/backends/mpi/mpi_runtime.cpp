#include "distributed/backends/mpi/mpi_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "tensor/error.h"

namespace kiln::distributed::mpi {

namespace {

// Never destroyed: the exit handler that finalises MPI runs after static
// destructors may already have run, and still needs the lock.
std::mutex& mpi_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

// Guarded by mpi_mutex().
bool g_initialized_by_kiln = false;
bool g_finalized = false;
int g_world_rank = -1;
bool g_started_by_launcher = false;

// Read before MPI_Init: a singleton's MPI_Init sets some of these itself.
bool launcher_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// Runs at exit on the thread that calls exit() (the main thread, which also
// initialised MPI, as MPI asks). Taking the lock means no communication
// thread is inside an MPI call; they see finalized() and fail what they
// still hold instead of calling MPI again.
void finalize_at_exit() {
  std::lock_guard guard(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  g_finalized = true;
}

}  // namespace

void ensure_initialized() {
  std::lock_guard guard(mpi_mutex());
  KILN_CHECK(!g_finalized, "mpi: MPI was already finalised in this process (at exit); a process group "
                           "cannot be created after that");
  int finalized = 0;
  MPI_Finalized(&finalized);
  KILN_CHECK(!finalized, "mpi: the program already called MPI_Finalize; MPI cannot be initialised again "
                         "in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    g_started_by_launcher = launcher_environment();
    int provided = MPI_THREAD_SINGLE;
    // MPI_Init_thread may be called with null argc/argv (MPI-2); mpirun
    // passes what MPI needs through the environment.
    const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    KILN_CHECK(code == MPI_SUCCESS, "mpi: MPI_Init_thread failed with error code ", code);
    g_initialized_by_kiln = true;
    std::atexit(finalize_at_exit);
    KILN_CHECK(provided >= MPI_THREAD_SERIALIZED, "mpi: this MPI library grants only ",
               thread_level_name(provided), " but the MPI backend calls MPI from its communication "
               "threads and needs MPI_THREAD_SERIALIZED");
  } else {
    if (g_world_rank < 0) g_started_by_launcher = launcher_environment();
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    KILN_CHECK(provided >= MPI_THREAD_SERIALIZED, "mpi: the program initialised MPI with ",
               thread_level_name(provided), " but the MPI backend calls MPI from its communication threads "
               "and needs MPI_THREAD_SERIALIZED: call MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) "
               "or leave initialisation to Kiln");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
}

bool started_by_launcher() {
  std::lock_guard guard(mpi_mutex());
  return g_started_by_launcher;
}

std::unique_lock<std::mutex> lock() { return std::unique_lock(mpi_mutex()); }

bool finalized() { return g_finalized; }

int world_rank() {
  std::lock_guard guard(mpi_mutex());
  return g_world_rank;
}

void abort_job(int code) {
  std::unique_lock guard(mpi_mutex(), std::defer_lock);
  for (int i = 0; i < 1000 && !guard.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this is for an MPI where it does
}

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  KILN_FAIL("mpi: ", what, " failed on world rank ", g_world_rank, ": ", error_string(code));
}

void Backoff::pause() {
  // About a millisecond of yielding covers a collective whose peers are all
  // there; after that the wait is for a peer that is late.
  constexpr int kYieldPolls = 2000;
  ++polls_;
  if (polls_ <= kYieldPolls) {
    std::this_thread::yield();
    return;
  }
  const int step = std::min(polls_ - kYieldPolls, 20);
  std::this_thread::sleep_for(std::chrono::microseconds(50 * step));
}

bool wait_request(MPI_Request& request, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  while (true) {
    {
      auto guard = lock();
      KILN_CHECK(!g_finalized, "mpi: ", what, ": MPI was finalised (the process is exiting)");
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    backoff.pause();
  }
}

}  // namespace kiln::distributed::mpi
