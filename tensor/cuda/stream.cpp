// Streams, the per-thread current stream, and events (Note [Current stream]
// in stream.h).
#include "tensor/cuda/stream.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/kernel_errors.h"

namespace kiln::cuda {

namespace {

// Ordinals past this are rejected; a machine has at most 16 GPUs today.
constexpr int kMaxDevices = 64;
// Pool streams per device and priority, as PyTorch: enough that independent
// users rarely share one, few enough to create at once.
constexpr int kStreamsPerPool = 32;

// The pool of one device (Note [Current stream]): normal and high priority
// streams, created on first use and never destroyed.
struct DevicePool {
  std::once_flag created;
  std::array<cudaStream_t, kStreamsPerPool> normal{};
  std::array<cudaStream_t, kStreamsPerPool> high{};
  std::atomic<uint32_t> next_normal{0};
  std::atomic<uint32_t> next_high{0};
};

DevicePool& pool_of(int index) {
  static std::array<DevicePool, kMaxDevices> pools;
  return pools[static_cast<size_t>(index)];
}

void create_pool(Device device, DevicePool& pool) {
  DeviceGuard guard(device, "Stream::create");
  int least = 0, greatest = 0;  // CUDA priorities: lower numbers run first
  KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (int i = 0; i < kStreamsPerPool; ++i) {
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&pool.normal[i], cudaStreamNonBlocking, least));
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&pool.high[i], cudaStreamNonBlocking, greatest));
  }
}

// The calling thread's current stream per device; null is the default stream.
thread_local std::array<cudaStream_t, kMaxDevices> current_streams{};

void check_index(Device device, const char* op) {
  KILN_CHECK(device.is_cuda(), op, ": expected a CUDA device, got ", device);
  KILN_CHECK(device.index >= 0 && device.index < kMaxDevices, op, ": CUDA device ordinal ", device.index,
             " is out of range 0..", kMaxDevices - 1);
}

}  // namespace

Stream::Stream(Device device) : device_(device), handle_(nullptr) { check_index(device, "Stream"); }

Stream Stream::create(Device device, int priority) {
  check_device(device, "Stream::create");
  check_index(device, "Stream::create");
  DevicePool& pool = pool_of(device.index);
  // call_once rethrows a failure and lets the next caller try again.
  std::call_once(pool.created, [&] { create_pool(device, pool); });
  if (priority < 0) {
    return Stream(device, pool.high[pool.next_high.fetch_add(1) % kStreamsPerPool]);
  }
  return Stream(device, pool.normal[pool.next_normal.fetch_add(1) % kStreamsPerPool]);
}

bool Stream::query() const {
  // The legacy default stream (handle 0) is the current device's.
  DeviceGuard guard(device_, "Stream::query");
  const cudaError_t status = cudaStreamQuery(handle_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not yet" is an answer, not an error to report later
    return false;
  }
  KILN_CUDA_CHECK(status);
  return true;
}

void Stream::synchronize() const {
  DeviceGuard guard(device_, "Stream::synchronize");
  KILN_CUDA_CHECK(cudaStreamSynchronize(handle_));
  check_kernel_errors(device_, handle_);  // Note [CUDA kernel errors]
}

Stream default_stream(Device device) { return Stream(device); }

Stream current_stream(Device device) {
  check_index(device, "current_stream");
  return Stream(device, current_streams[static_cast<size_t>(device.index)]);
}

void set_current_stream(const Stream& stream) {
  current_streams[static_cast<size_t>(stream.device().index)] = stream.handle();
}

cudaStream_t current_raw_stream(Device device) {
  check_index(device, "current_raw_stream");
  return current_streams[static_cast<size_t>(device.index)];
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() { set_current_stream(previous_); }

Event::~Event() {
  // Must not throw; destroying fails only once the runtime is unloading at
  // exit or after a sticky fault that its op already reported.
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_), timing_(other.timing_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
    timing_ = other.timing_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device(), "Event::record");
  if (event_ == nullptr) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  KILN_CHECK(device_ == stream.device(), "Event::record: the event belongs to ", device_,
             " and cannot mark a stream of ", stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(event_, stream.handle()));
}

void Event::block(const Stream& stream) const {
  if (event_ == nullptr) return;  // nothing marked: nothing to wait for
  DeviceGuard guard(stream.device(), "Event::block");
  KILN_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), event_, 0));
}

bool Event::query() const {
  if (event_ == nullptr) return true;
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const {
  if (event_ == nullptr) return;
  KILN_CUDA_CHECK(cudaEventSynchronize(event_));
}

float Event::elapsed_time(const Event& end) const {
  KILN_CHECK(timing_ && end.timing_, "Event::elapsed_time: both events must be created with enable_timing = true");
  KILN_CHECK(is_recorded() && end.is_recorded(), "Event::elapsed_time: both events must be recorded first (start ",
             is_recorded() ? "is" : "is not", ", end ", end.is_recorded() ? "is" : "is not", ")");
  KILN_CHECK(device_ == end.device_, "Event::elapsed_time: the events are on different devices, ", device_, " and ",
             end.device_);
  end.synchronize();
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

void synchronize_device(Device device) {
  DeviceGuard guard(device, "cuda::synchronize");
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
  check_kernel_errors(device);  // Note [CUDA kernel errors]
}

}  // namespace kiln::cuda
