// The per-stream error buffers and lists of watched launches (Note [CUDA
// kernel errors] in kernel_errors.h).
#include "tensor/cuda/kernel_errors.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/graph.h"
#include "tensor/error.h"

namespace kiln::cuda {

namespace {

constexpr size_t kWords = 5;  // flag, launch, three values

// One stream's state. Streams are never destroyed (Note [Current stream] in
// stream.h), so neither is this; the buffer lives as long as the process.
// Launch ids count up for ever, so that a kernel's record names its own
// launch even when other threads queue on the same stream and check it
// meanwhile: the id is handed out before the kernel is queued, and another
// thread's wait may end before it runs.
struct StreamErrors {
  unsigned long long* words = nullptr;  // device memory, kWords
  uint64_t next_launch = 0;             // the id of the next watched launch
  uint64_t read_through = 0;            // next_launch when the buffer was last read
  // The messages of the last kMaxWatchedLaunches launches: launch id at id % kMaxWatchedLaunches.
  std::vector<std::pair<uint64_t, KernelErrorMessage>> recent =
      std::vector<std::pair<uint64_t, KernelErrorMessage>>(kMaxWatchedLaunches);
};

std::mutex registry_mutex;
std::map<std::pair<int, cudaStream_t>, StreamErrors>& registry() {
  static auto* streams = new std::map<std::pair<int, cudaStream_t>, StreamErrors>();  // never destroyed: see above
  return *streams;
}

// The stream's buffer, zeroed in stream order before any kernel uses it.
// The cudaMalloc runs in relaxed capture mode: another thread's CUDA graph
// capture would otherwise refuse it, and the buffer is no step of a graph.
unsigned long long* make_buffer(cudaStream_t stream) {
  void* words = nullptr;
  {
    RelaxedCaptureMode relaxed;
    KILN_CUDA_CHECK(cudaMalloc(&words, kWords * sizeof(unsigned long long)));
  }
  KILN_CUDA_CHECK(cudaMemsetAsync(words, 0, kWords * sizeof(unsigned long long), stream));
  return static_cast<unsigned long long*>(words);
}

// Reads `errors`' buffer (the host has waited for the stream) unless no
// launch was watched since the last read, and returns the error to throw, or
// "" when none. A launch whose id was handed out but whose kernel another
// thread has not queued yet is read at a later check, with its own message.
std::string take_error(Device device, cudaStream_t stream, StreamErrors& errors) {
  if (errors.next_launch == errors.read_through) return "";
  errors.read_through = errors.next_launch;
  unsigned long long host[kWords] = {};
  KILN_CUDA_CHECK(cudaMemcpyAsync(host, errors.words, sizeof host, cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[0] == 0) return "";
  KILN_CUDA_CHECK(cudaMemsetAsync(errors.words, 0, sizeof host, stream));
  const KernelErrorValues values{static_cast<int64_t>(host[2]), static_cast<int64_t>(host[3]),
                                 static_cast<int64_t>(host[4])};
  const auto& [id, message] = errors.recent[host[1] % kMaxWatchedLaunches];
  const std::string what =
      id == host[1] && message
          ? message(values)
          : kiln::detail::str("a CUDA kernel recorded an error in watched launch ", host[1],
                              ", whose message is no longer kept (more than ", kMaxWatchedLaunches, " launches ago)");
  return kiln::detail::str(what, " (found on ", device,
                           " by a kernel queued earlier; reported when the host next waited for the device)");
}

}  // namespace

ErrorSlot watch_kernel_errors(Device device, cudaStream_t stream, KernelErrorMessage message) {
  if (stream_capturing(stream)) return {nullptr, 0};
  std::unique_lock<std::mutex> lock(registry_mutex);
  StreamErrors& errors = registry()[{device.index, stream}];
  if (errors.words == nullptr) errors.words = make_buffer(stream);
  if (errors.next_launch - errors.read_through >= kMaxWatchedLaunches) {
    lock.unlock();
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    check_kernel_errors(device, stream);
    lock.lock();
  }
  const uint64_t id = errors.next_launch++;
  errors.recent[id % kMaxWatchedLaunches] = {id, std::move(message)};
  return {errors.words, static_cast<unsigned long long>(id)};
}

void check_kernel_errors(Device device, cudaStream_t stream) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto found = registry().find({device.index, stream});
    if (found == registry().end()) return;
    DeviceGuard guard(device, "check_kernel_errors");
    error = take_error(device, stream, found->second);
  }
  KILN_CHECK(error.empty(), error);
}

void check_kernel_errors(Device device) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    DeviceGuard guard(device, "check_kernel_errors");
    for (auto& [key, errors] : registry()) {
      if (key.first != device.index) continue;
      std::string found = take_error(device, key.second, errors);
      if (error.empty()) error = std::move(found);  // one error is thrown; the others are cleared
    }
  }
  KILN_CHECK(error.empty(), error);
}

}  // namespace kiln::cuda
