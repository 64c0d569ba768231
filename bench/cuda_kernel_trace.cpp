// cuda_kernel_trace: where a CUDA program's GPU time goes, kernel by kernel,
// without a profiler. Loaded into any program with LD_PRELOAD, it asks CUPTI
// (the CUDA profiling interface that Nsight and PyTorch's profiler use) for an
// activity record of every kernel, memcpy and memset the program runs, and at
// exit prints the GPU time summed per kernel name, largest first:
//
//   LD_PRELOAD=build/bench/libcuda_kernel_trace.so build/bench/lenet --device cuda --batch 512
//   cuda_kernel_trace: 262.6 ms of GPU time in 38 kinds of kernel and copy
//   cuda_kernel_trace:  24.18 ms   9.2%    210 x  115.15 us  sm80_xmma_dgrad_implicit_gemm_f32f32_...
//
// It works the same on a PyTorch program (python3 bench/lenet_torch.py
// --device cuda), which is how Kiln's kernels were compared with PyTorch's
// (docs/BENCHMARKS.md). The times are the kernels' own, start to end on the
// GPU; host time and gaps between kernels are not in them. KILN_TRACE_ROWS
// sets how many rows print (default 30).
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Total {
  double nanoseconds = 0;
  int64_t count = 0;
};

// Totals by name. Never destroyed: CUPTI may deliver its last buffer while
// static destructors run.
std::mutex& totals_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<std::string, Total>& totals() {
  static auto* map = new std::map<std::string, Total>;
  return *map;
}

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kNameLength = 100;

// CUPTI asks for a buffer to fill with activity records ...
void CUPTIAPI give_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;  // as many as fit
}

// A kernel's mangled name, demangled and cut to kNameLength characters.
std::string readable(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  return name.size() > kNameLength ? name.substr(0, kNameLength) : name;
}

// ... and hands it back full (or at a flush), to be read and freed here.
void CUPTIAPI take_buffer(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  std::lock_guard<std::mutex> lock(totals_mutex());
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    std::string name;
    uint64_t start = 0, end = 0;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      name = readable(kernel->name);
      start = kernel->start;
      end = kernel->end;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      static const char* const kKinds[] = {"unknown", "host to device", "device to host", "host to array",
                                           "array to host", "array to array", "array to device", "device to array",
                                           "device to device", "host to host", "peer to peer"};
      name = std::string("[memcpy ") + (copy->copyKind < 11 ? kKinds[copy->copyKind] : "other") + "]";
      start = copy->start;
      end = copy->end;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      name = "[memset]";
      start = set->start;
      end = set->end;
    } else {
      continue;
    }
    Total& total = totals()[name];
    total.nanoseconds += static_cast<double>(end - start);
    ++total.count;
  }
  std::free(buffer);
}

void print_totals() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(totals_mutex());
  std::vector<std::pair<std::string, Total>> rows(totals().begin(), totals().end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.nanoseconds > b.second.nanoseconds; });
  double all = 0;
  for (const auto& row : rows) all += row.second.nanoseconds;
  std::fprintf(stderr, "cuda_kernel_trace: %.1f ms of GPU time in %zu kinds of kernel and copy\n", all / 1e6,
               rows.size());
  const char* limit = std::getenv("KILN_TRACE_ROWS");
  const size_t shown = std::min(rows.size(), static_cast<size_t>(limit ? std::atoi(limit) : 30));
  for (size_t i = 0; i < shown; ++i) {
    const Total& t = rows[i].second;
    std::fprintf(stderr, "cuda_kernel_trace: %8.2f ms %5.1f%% %7lld x %8.2f us  %s\n", t.nanoseconds / 1e6,
                 100 * t.nanoseconds / all, static_cast<long long>(t.count), t.nanoseconds / 1e3 / t.count,
                 rows[i].first.c_str());
  }
}

// Runs when the library is loaded, before the program's main.
__attribute__((constructor)) void start_tracing() {
  if (cuptiActivityRegisterCallbacks(give_buffer, take_buffer) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cuda_kernel_trace: CUPTI refused to trace this process; nothing will be printed\n");
    return;
  }
  std::atexit(print_totals);
}

}  // namespace
