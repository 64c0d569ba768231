// HandlePool: one library handle (cuBLAS, cuDNN) per device and host thread.
//
// Note [Library handles]
// A cuBLAS or cuDNN handle holds per-call state (its stream, its workspace,
// cuDNN's algorithm caches) and must not be used by two host threads at
// once, and creating one costs milliseconds (it loads kernels and allocates).
// So each (thread, device) pair gets a handle of its own, created lazily on
// first use. When a thread exits its handles go back to a process-wide pool
// that the next new thread takes from, instead of being destroyed: a data
// loader that starts worker threads every epoch reuses the same few handles.
// The pool itself is never destroyed. Destroying handles at process exit
// races the CUDA runtime's own teardown (the driver may already be gone and
// the destroy call crashes rather than fails), and the driver frees every
// resource of an exiting process anyway; PyTorch leaks its handles at exit
// for the same reason.
//
// Callers set the handle's stream to cuda::current_raw_stream(device) before
// every call (cublas_handle / cudnn_handle do it), so work follows the
// thread's current stream (Note [Current stream]).
#pragma once

#include <map>
#include <mutex>
#include <vector>

namespace kiln::cuda {

// Handle: the library's opaque pointer type. Create: Handle() that makes one
// on the current device and throws on failure.
template <class Handle>
class HandlePool {
 public:
  using Create = Handle (*)();

  explicit HandlePool(Create create) : create_(create) {}

  // The calling thread's handle for device `index` (which must be current).
  Handle get(int index) {
    Lease& lease = leases();
    auto found = lease.handles.find(index);
    if (found != lease.handles.end()) return found->second;
    Handle handle = take(index);
    lease.handles.emplace(index, handle);
    return handle;
  }

 private:
  // A thread's handles; returned to the pool when the thread exits.
  struct Lease {
    HandlePool* pool = nullptr;
    std::map<int, Handle> handles;  // device index -> handle
    ~Lease() {
      if (pool == nullptr) return;
      std::lock_guard<std::mutex> lock(pool->mutex_);
      for (auto& [index, handle] : handles) pool->free_[index].push_back(handle);
    }
  };

  Lease& leases() {
    // One Lease per thread and pool: the template is instantiated once per
    // handle type, and each type has one pool.
    thread_local Lease lease;
    lease.pool = this;
    return lease;
  }

  Handle take(int index) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Handle>& free = free_[index];
      if (!free.empty()) {
        Handle handle = free.back();
        free.pop_back();
        return handle;
      }
    }
    return create_();
  }

  Create create_;
  std::mutex mutex_;
  std::map<int, std::vector<Handle>> free_;  // device index -> handles no thread holds
};

}  // namespace kiln::cuda
