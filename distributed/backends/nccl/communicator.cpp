// One non-blocking NCCL communicator (Note [NCCL timeouts] in communicator.h).
#include "distributed/backends/nccl/communicator.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "distributed/backends/nccl/nccl_check.h"
#include "tensor/error.h"

namespace kiln::distributed::nccl {

namespace {

// Polls at first every few microseconds (a collective is usually enqueued at
// once), then backs off to this, so that a long wait does not spin a core.
constexpr auto kLongestPause = std::chrono::milliseconds(1);

ncclConfig_t non_blocking_config(const std::string& name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name.c_str();
  return config;
}

// Waits until NCCL is no longer working on the calls last made on `handle`
// (Note [NCCL timeouts]). Throws kiln::Error naming `call` if NCCL reports an
// error, or is still working after `timeout`.
void settle(ncclComm_t handle, const std::string& call, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::microseconds pause(4);
  while (true) {
    ncclResult_t state = ncclSuccess;
    KILN_NCCL_CHECK(ncclCommGetAsyncError(handle, &state));
    if (state == ncclSuccess) return;
    KILN_CHECK(state == ncclInProgress, call, " failed: NCCL reports ", describe_result(state));
    KILN_CHECK(std::chrono::steady_clock::now() < deadline, call, " was still in progress after ", timeout.count(),
               " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kLongestPause);
  }
}

}  // namespace

Communicator::Communicator(std::string description, std::chrono::milliseconds timeout)
    : description_(std::move(description)), timeout_(timeout) {}

Communicator::~Communicator() { close(); }

std::shared_ptr<Communicator> Communicator::create(const ncclUniqueId& id, int rank, int size, std::string description,
                                                   std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> comm(new Communicator(std::move(description), timeout));
  ncclConfig_t config = non_blocking_config(comm->description_);
  std::lock_guard lock(comm->mutex_);
  try {
    KILN_NCCL_CHECK_ISSUED(ncclCommInitRankConfig(&comm->handle_, size, id, rank, &config));
    settle(comm->handle_, "ncclCommInitRankConfig", timeout);
  } catch (const std::exception& e) {
    comm->abort_locked("creating it failed");
    KILN_FAIL("nccl: ", comm->description_, " could not create its NCCL communicator (timeout ", timeout.count(),
              " ms): ", e.what(), "; every rank of the group must create it, each on a GPU of its own");
  }
  return comm;
}

std::shared_ptr<Communicator> Communicator::split(bool member, int key, std::string description,
                                                  std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> child(new Communicator(std::move(description), timeout));
  ncclConfig_t config = non_blocking_config(child->description_);
  std::lock_guard lock(mutex_);
  throw_if_gone_locked("new_group");
  try {
    KILN_NCCL_CHECK_ISSUED(ncclCommSplit(handle_, member ? 0 : NCCL_SPLIT_NOCOLOR, key, &child->handle_, &config));
    // The split is a collective over this communicator; the new one then
    // finishes its own setup, which is polled on its own handle.
    settle(handle_, "ncclCommSplit", timeout);
    if (child->handle_ != nullptr) settle(child->handle_, "ncclCommSplit (the new communicator)", timeout);
    KILN_CHECK(!member || child->handle_ != nullptr, "ncclCommSplit returned no communicator for a member");
  } catch (const std::exception& e) {
    // The parent first: NCCL writes the child's handle only when the split
    // job ends, and aborting the parent ends it, so that the child's abort
    // then finds the handle to abort (not shared yet: no lock needed).
    abort_locked("new_group failed");
    child->abort_locked("creating it failed");
    KILN_FAIL("nccl new_group on ", description_, ": could not split off ", child->description_, " (timeout ",
              timeout.count(), " ms): ", e.what(),
              "; every rank of the parent group must call new_group with the same ranks; the parent's "
              "communicator was aborted");
  }
  if (!member) return nullptr;
  return child;
}

void Communicator::run(const std::string& what, const std::function<void(ncclComm_t)>& issue) {
  std::lock_guard lock(mutex_);
  throw_if_gone_locked(what);
  try {
    issue(handle_);
    settle(handle_, what, timeout_);
  } catch (const std::exception& e) {
    abort_locked(what + " failed");
    KILN_FAIL("nccl ", what, " on ", description_, ": ", e.what(), "; the communicator was aborted");
  }
}

void Communicator::check_async_error(const std::string& what) {
  std::lock_guard lock(mutex_);
  throw_if_gone_locked(what);
  try {
    ncclResult_t state = ncclSuccess;
    KILN_NCCL_CHECK(ncclCommGetAsyncError(handle_, &state));
    KILN_CHECK(state == ncclSuccess || state == ncclInProgress, "NCCL reports ", describe_result(state));
  } catch (const std::exception& e) {
    abort_locked(what + " failed");
    KILN_FAIL("nccl ", what, " on ", description_, ": ", e.what(), "; the communicator was aborted");
  }
}

void Communicator::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  abort_locked(reason);
}

std::string Communicator::aborted_because() const {
  return aborted_.load(std::memory_order_acquire) ? gone_because_ : std::string();
}

void Communicator::close() noexcept {
  std::lock_guard lock(mutex_);
  if (handle_ == nullptr) return;
  try {
    KILN_NCCL_CHECK_ISSUED(ncclCommFinalize(handle_));
    settle(handle_, "ncclCommFinalize", timeout_);
    ncclComm_t handle = std::exchange(handle_, nullptr);
    gone_because_ = "it was closed";
    // ncclInProgress: NCCL frees the rest in its own threads.
    KILN_NCCL_CHECK_ISSUED(ncclCommDestroy(handle));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: nccl: could not close the communicator of %s cleanly, aborting it: %s\n",
                 description_.c_str(), e.what());
    abort_locked("closing it failed");
  }
}

void Communicator::throw_if_gone_locked(const std::string& what) const {
  KILN_CHECK(handle_ != nullptr, "nccl ", what, " on ", description_, ": the communicator cannot be used because ",
             gone_because_);
}

void Communicator::abort_locked(const std::string& reason) noexcept {
  if (handle_ == nullptr) return;
  gone_because_ = "it was aborted after " + reason;
  aborted_.store(true, std::memory_order_release);
  ncclComm_t handle = std::exchange(handle_, nullptr);
  // Not checked on purpose: ncclInProgress means NCCL finishes the teardown in
  // its own threads, and an error could not be acted on, the handle being
  // gone either way.
  (void)ncclCommAbort(handle);
}

}  // namespace kiln::distributed::nccl
