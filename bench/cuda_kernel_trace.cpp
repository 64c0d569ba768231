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
//
// KILN_TRACE_HOST=1 also records every CUDA runtime and driver call (their
// start and end on the host) and prints where the host's time goes between
// launches: each call that queued GPU work (a kernel, copy or memset, or a
// graph) is charged the host time since the previous such call of its
// thread returned, through its own end; summed by what it queued, largest
// first. In an eager training step that is each op's host cost (its checks,
// allocation, autograd record, library calls and the launch), named by its
// kernel, for Kiln and PyTorch alike:
//   cuda_kernel_trace host:  9.80 ms  21.3%   400 x  24.50 us  sm90_xmma_fprop_implicit_gemm_...
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
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

// KILN_TRACE_HOST: the API calls, and what each correlation id queued.
struct ApiCall {
  uint64_t start = 0, end = 0;
  uint32_t thread = 0;
  uint32_t correlation = 0;
  bool graph = false;  // a graph launch: its kernels are the graph's, not one op's
};
std::vector<ApiCall>& api_calls() {
  static auto* calls = new std::vector<ApiCall>;
  return *calls;
}
std::unordered_map<uint32_t, std::string>& queued() {
  static auto* names = new std::unordered_map<uint32_t, std::string>;
  return *names;
}
bool host_tracing = false;

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
    uint32_t correlation = 0;
    if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME || record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const auto* call = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* api = nullptr;
      const CUpti_CallbackDomain domain =
          record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
      const bool graph = cuptiGetCallbackName(domain, call->cbid, &api) == CUPTI_SUCCESS && api != nullptr &&
                         std::strstr(api, "GraphLaunch") != nullptr;
      api_calls().push_back({call->start, call->end, call->threadId, call->correlationId, graph});
      continue;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      name = readable(kernel->name);
      start = kernel->start;
      end = kernel->end;
      correlation = kernel->correlationId;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      static const char* const kKinds[] = {"unknown",          "host to device", "device to host",  "host to array",
                                           "array to host",    "array to array", "array to device", "device to array",
                                           "device to device", "host to host",   "peer to peer"};
      name = std::string("[memcpy ") + (copy->copyKind < 11 ? kKinds[copy->copyKind] : "other") + "]";
      start = copy->start;
      end = copy->end;
      correlation = copy->correlationId;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      name = "[memset]";
      start = set->start;
      end = set->end;
      correlation = set->correlationId;
    } else {
      continue;
    }
    if (host_tracing) queued().emplace(correlation, name);  // the first of a correlation's kernels names it
    Total& total = totals()[name];
    total.nanoseconds += static_cast<double>(end - start);
    ++total.count;
  }
  std::free(buffer);
}

// The first KILN_TRACE_ROWS rows (default 30), largest first, each with its
// share of `all` nanoseconds, its count and its mean, after `label`.
void print_rows(const char* label, const std::vector<std::pair<std::string, Total>>& rows, double all) {
  const char* limit = std::getenv("KILN_TRACE_ROWS");
  const size_t shown = std::min(rows.size(), static_cast<size_t>(limit ? std::atoi(limit) : 30));
  for (size_t i = 0; i < shown; ++i) {
    const Total& t = rows[i].second;
    std::fprintf(stderr, "%s: %8.2f ms %5.1f%% %7lld x %8.2f us  %s\n", label, t.nanoseconds / 1e6,
                 100 * t.nanoseconds / all, static_cast<long long>(t.count), t.nanoseconds / 1e3 / t.count,
                 rows[i].first.c_str());
  }
}

// The KILN_TRACE_HOST table: host time charged to each call that queued
// GPU work, by what it queued.
void print_host_totals() {
  // One call per correlation id (a runtime call and the driver call it
  // makes share one): the earliest start and the latest end.
  std::unordered_map<uint32_t, ApiCall> by_correlation;
  for (const ApiCall& c : api_calls()) {
    if (queued().count(c.correlation) == 0) continue;
    auto [it, fresh] = by_correlation.emplace(c.correlation, c);
    if (!fresh) {
      it->second.start = std::min(it->second.start, c.start);
      it->second.end = std::max(it->second.end, c.end);
      it->second.graph = it->second.graph || c.graph;
    }
  }
  std::vector<ApiCall> launches;
  for (const auto& entry : by_correlation) launches.push_back(entry.second);
  std::sort(launches.begin(), launches.end(), [](const ApiCall& a, const ApiCall& b) {
    return a.thread != b.thread ? a.thread < b.thread : a.start < b.start;
  });
  std::map<std::string, Total> host;
  for (size_t i = 1; i < launches.size(); ++i) {
    const ApiCall &previous = launches[i - 1], &call = launches[i];
    if (previous.thread != call.thread || call.end < previous.end) continue;
    Total& total = host[call.graph ? std::string("[graph launch]") : queued()[call.correlation]];
    total.nanoseconds += static_cast<double>(call.end - previous.end);
    ++total.count;
  }
  std::vector<std::pair<std::string, Total>> rows(host.begin(), host.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.nanoseconds > b.second.nanoseconds; });
  double all = 0;
  int64_t calls = 0;
  for (const auto& row : rows) {
    all += row.second.nanoseconds;
    calls += row.second.count;
  }
  std::fprintf(stderr, "cuda_kernel_trace host: %.1f ms of host time before %lld calls that queued GPU work\n",
               all / 1e6, static_cast<long long>(calls));
  print_rows("cuda_kernel_trace host", rows, all);
}

void print_totals() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(totals_mutex());
  if (host_tracing) print_host_totals();
  std::vector<std::pair<std::string, Total>> rows(totals().begin(), totals().end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.nanoseconds > b.second.nanoseconds; });
  double all = 0;
  for (const auto& row : rows) all += row.second.nanoseconds;
  std::fprintf(stderr, "cuda_kernel_trace: %.1f ms of GPU time in %zu kinds of kernel and copy\n", all / 1e6,
               rows.size());
  print_rows("cuda_kernel_trace", rows, all);
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
  const char* host = std::getenv("KILN_TRACE_HOST");
  if (host != nullptr && std::strcmp(host, "1") == 0) {
    host_tracing = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) == CUPTI_SUCCESS &&
                   cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_SUCCESS;
    if (!host_tracing) std::fprintf(stderr, "cuda_kernel_trace: CUPTI refused to record API calls; no host table\n");
  }
  std::atexit(print_totals);
}

}  // namespace
