// Convolutions through cuDNN's graph API (tensor/cuda/cudnn_graph.h).
//
// Note [cuDNN graph API]
// cuDNN 9 has two interfaces. The legacy one (cudnnConvolutionForward and
// its two backward siblings, tensor/cuda/conv.cpp) takes descriptors and an
// algorithm number on every call, and on an H100 each call costs the host 30
// to 50 microseconds even for a shape it has just run (bench/
// cuda_conv_host.cpp); a LeNet step makes five, so at batch 64, where the
// step is bound by the host, they are a third of it (docs/BENCHMARKS.md).
// The graph API splits the work in two:
// - once per layer shape: describe the operation (a graph of one
//   convolution node whose tensors x, w and y carry shape, strides, dtype,
//   pointer alignment and a unique id), ask cuDNN's heuristics for a ranked
//   list of engine configurations, and finalize the first acceptable one
//   into an execution plan, which is cached;
// - per call: a variant pack binds the three data pointers (by unique id)
//   and a workspace, and cudnnBackendExecute runs the plan.
// "Acceptable" follows Note [cuDNN convolution algorithms], read from each
// engine's numerical notes: deterministic engines first (a non-deterministic
// one only when nothing else is offered, by either of cuDNN's two
// heuristics modes); nothing that converts the inputs down; for float32
// nothing that uses tensor cores unless cuda::allow_tf32(); for float16 and
// bfloat16 nothing that sums in reduced precision; a workspace within
// kMaxConvWorkspaceBytes. Plans are cached per key (conv.cpp's algorithm
// key: direction, dtype, math, device, sizes, strides, alignments, geometry)
// and per handle, since a plan is finalized for one handle, and handles are
// one per host thread (Note [Library handles]), as PyTorch keeps its plans
// per thread. Engines that cuDNN compiles at run time (behaviour note
// RUNTIME_COMPILATION: a compiler run when the plan is finalized) come after
// the precompiled ones. Where cuDNN offers no acceptable engine, declines a
// descriptor or plan (a NOT_SUPPORTED status), or a new plan fails its first
// run, the key is remembered as declined and the legacy API runs it
// instead; KILN_CUDNN_GRAPH_DEBUG=1 prints why to stderr, engine by engine.
// The graph API is the default (cuda::set_cudnn_api and KILN_CUDNN_API=
// legacy choose the legacy calls, tensor/cuda/settings.h): on an H100 it
// ran LeNet's layers with the same GPU time as the legacy calls at a third
// of their host cost (bench/cuda_conv_host.cpp, docs/BENCHMARKS.md).
#include "tensor/cuda/cudnn_graph.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "tensor/cuda/cudnn.h"
#include "tensor/cuda/settings.h"

namespace kiln::cuda {

namespace {

// The unique ids of the three tensors of every convolution graph.
constexpr int64_t kX = 1, kW = 2, kY = 3;

std::atomic<int64_t> graph_runs{0};

// A status in cuDNN's NOT_SUPPORTED range from a call that builds a plan:
// the key goes to the legacy API (Note [cuDNN graph API]).
struct Declined {
  std::string why;
};

// cuDNN's status and its last error message.
std::string status_text(cudnnStatus_t status) {
  char message[512] = {};
  cudnnGetLastErrorString(message, sizeof message);
  return std::string(cudnnGetErrorString(status)) + (message[0] ? std::string(": ") + message : std::string());
}

// Throws Declined for a decline, kiln::Error for any other failure; `what`
// names the call and what it was given ("cudnnBackendSetAttribute
// (attribute 42)").
[[noreturn]] void fail(cudnnStatus_t status, const std::string& what) {
  if (cudnn_declined(status)) throw Declined{what + ": " + status_text(status)};
  detail::throw_cudnn_error(status, what.c_str(), __FILE__, __LINE__);
}

bool debug_declines() {
  static const bool on = [] {
    const char* value = std::getenv("KILN_CUDNN_GRAPH_DEBUG");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return on;
}

// A backend descriptor owned for its lifetime.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    const cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &descriptor_);
    if (status != CUDNN_STATUS_SUCCESS)
      fail(status, "cudnnBackendCreateDescriptor (type " + std::to_string(type) + ")");
  }
  ~Descriptor() {
    if (descriptor_ != nullptr) (void)cudnnBackendDestroyDescriptor(descriptor_);
  }
  Descriptor(Descriptor&& other) noexcept : descriptor_(std::exchange(other.descriptor_, nullptr)) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  // Attribute `name` := `count` values of cuDNN type `type` at `values`.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    const cudnnStatus_t status = cudnnBackendSetAttribute(descriptor_, name, type, count, values);
    if (status != CUDNN_STATUS_SUCCESS)
      fail(status, "cudnnBackendSetAttribute (attribute " + std::to_string(name) + ")");
  }
  void set(cudnnBackendAttributeName_t name, const Descriptor& other) {
    cudnnBackendDescriptor_t raw = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> values) {
    set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.begin());
  }

  // The status, for a caller that tells a decline from a failure.
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(descriptor_); }
  void finalize(const char* what) {
    const cudnnStatus_t status = try_finalize();
    if (status != CUDNN_STATUS_SUCCESS) fail(status, std::string("cudnnBackendFinalize (") + what + ")");
  }

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

Descriptor tensor(int64_t uid, DType dtype, std::initializer_list<int64_t> dims, std::initializer_list<int64_t> strides,
                  int64_t byte_alignment) {
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = cudnn_data_type(dtype);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  d.set(CUDNN_ATTR_TENSOR_STRIDES, strides);
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid});
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {byte_alignment});
  d.finalize("tensor");
  return d;
}

// t (N, C, H, W), planes contiguous; a size-1 dim's stride is replaced by
// the packed one, as conv.cpp's legacy descriptors do.
Descriptor activation(int64_t uid, const Tensor& t) {
  const int64_t hw = t.size(2) * t.size(3);
  const int64_t s1 = t.size(1) == 1 ? hw : t.stride(1);
  const int64_t s0 = t.size(0) == 1 ? t.size(1) * s1 : t.stride(0);
  return tensor(uid, t.dtype(), {t.size(0), t.size(1), t.size(2), t.size(3)}, {s0, s1, t.size(3), 1},
                pointer_alignment(t));
}

// w (OC, C*kh*kw), contiguous, as (OC, C, kh, kw).
Descriptor filter(int64_t uid, const Tensor& w, const Conv2dShape& s) {
  const int64_t plane = s.kernel.h * s.kernel.w;
  return tensor(uid, w.dtype(), {w.size(0), s.channels, s.kernel.h, s.kernel.w},
                {s.channels * plane, plane, s.kernel.w, 1}, pointer_alignment(w));
}

Descriptor convolution(const Conv2dParams& p, DType dtype) {
  Descriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  // Products summed in float32 for the 16-bit dtypes (Note [16-bit cuDNN
  // convolutions]), else in the data's own type.
  const cudnnDataType_t compute = dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  d.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, {2});
  d.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, {p.dilation.h, p.dilation.w});
  d.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {p.stride.h, p.stride.w});
  d.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {p.padding.h, p.padding.w});
  d.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {p.padding.h, p.padding.w});
  d.finalize("convolution");
  return d;
}

// The operation node of one direction and the attribute names of its parts.
struct OperationKind {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationKind operation_kind(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::BackwardFilter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  KILN_FAIL("cuDNN graph: invalid convolution direction ", static_cast<int64_t>(direction));
}

// What the engines may do: Kiln's rules for a dtype (Note [cuDNN graph
// API]), with TF32 as the key says (so that a plan matches its key even if
// another thread changes cuda::allow_tf32 meanwhile).
struct Rules {
  DType dtype;
  bool tf32;
};

// Why an engine with these numerical notes breaks the rules, or null when
// it keeps them; `deterministic_only` in the first passes.
const char* broken_rule(const cudnnBackendNumericalNote_t* notes, int64_t count, const Rules& rules,
                        bool deterministic_only) {
  for (int64_t i = 0; i < count; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        if (deterministic_only) return "non-deterministic";
        break;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (rules.dtype == DType::Float32 && !rules.tf32) return "tensor cores (TF32) on float32";
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        return "converts its inputs down";  // for every dtype (as PyTorch refuses it)
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        if (is_16_bit(rules.dtype)) return "sums in reduced precision";
        break;
      default:
        break;
    }
  }
  return nullptr;
}

// The descriptors of one convolution's operation graph. A plan made from
// it may refer to them, so they live as long as the plan (as cudnn-
// frontend's objects keep theirs, each holding what it was built from).
struct GraphParts {
  Descriptor conv, x, w, y, op, graph;
};

// The chosen configuration, the plan finalized from it, and the workspace
// the plan needs.
struct Chosen {
  Descriptor config;
  Descriptor plan;
  int64_t workspace_bytes;
};

// A finalized plan with the graph it was made from.
struct Plan {
  GraphParts parts;
  Chosen chosen;
};

// The operation graph of `direction` on these tensors; throws Declined when
// cuDNN declines to build it.
GraphParts operation_graph(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                           const Conv2dParams& p, const Conv2dShape& s, cudnnHandle_t handle) {
  const OperationKind kind = operation_kind(direction);
  GraphParts parts{convolution(p, x.dtype()), activation(kX, x),
                   filter(kW, w, s),          activation(kY, y),
                   Descriptor(kind.type),     Descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)};
  parts.op.set(kind.x, parts.x);
  parts.op.set(kind.w, parts.w);
  parts.op.set(kind.y, parts.y);
  parts.op.set(kind.conv, parts.conv);
  // alpha 1, beta 0: the result overwrites the output; in the compute type.
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool wide = x.dtype() == DType::Float64;
  parts.op.set(kind.alpha, wide ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT, 1,
               wide ? static_cast<const void*>(&one64) : &one32);
  parts.op.set(kind.beta, wide ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT, 1,
               wide ? static_cast<const void*>(&zero64) : &zero32);
  parts.op.finalize("convolution operation");
  parts.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, parts.op);
  parts.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  parts.graph.finalize("operation graph");
  return parts;
}

// The engine configurations cuDNN's heuristics in `mode` rank for `graph`,
// best first.
std::vector<Descriptor> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  std::vector<Descriptor> configs;
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  // A mode that declines the graph offers nothing.
  cudnnStatus_t status = heuristics.try_finalize();
  if (cudnn_declined(status)) return configs;
  if (status != CUDNN_STATUS_SUCCESS)
    fail(status, "cudnnBackendFinalize (engine heuristics, mode " + std::to_string(mode) + ")");
  int64_t count = 0;
  status = cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                    &count, nullptr);
  if (cudnn_declined(status)) return configs;
  if (status != CUDNN_STATUS_SUCCESS) fail(status, "cudnnBackendGetAttribute (engine heuristics' results)");
  // The configurations are written into descriptors created beforehand.
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  if (count == 0) return configs;
  status = cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    count, &count, raw.data());
  if (cudnn_declined(status)) count = 0;
  if (status != CUDNN_STATUS_SUCCESS && !cudnn_declined(status)) {
    fail(status, "cudnnBackendGetAttribute (engine heuristics' results)");
  }
  while (static_cast<int64_t>(configs.size()) > count) configs.pop_back();
  return configs;
}

// The engine of a configuration: its index in cuDNN's list (for messages),
// its numerical notes, and whether cuDNN compiles it at run time.
struct EngineNotes {
  int64_t index = -1;
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT] = {};
  int64_t numerical_count = 0;
  bool runtime_compiled = false;
};

// None when the notes cannot be read (such an engine is not taken).
std::optional<EngineNotes> engine_notes(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t engine_raw = engine.get();
  int64_t got = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                               &engine_raw) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  EngineNotes notes;
  (void)cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &notes.index);
  if (cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &notes.numerical_count,
                               notes.numerical) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t behavior_count = 0;
  if (cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &behavior_count, behavior) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < behavior_count; ++i) {
      notes.runtime_compiled = notes.runtime_compiled || behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    }
  }
  return notes;
}

// The first of `configs` (in ranking order) whose engine keeps `rules` and
// that finalizes into a plan within the workspace limit, in four passes:
// deterministic and precompiled engines, deterministic ones compiled at run
// time, then the same two without the determinism rule. A configuration is
// tried once. The chosen one moves into the plan; `why` collects, for the
// debug message, why each other one was passed over.
std::optional<Chosen> first_acceptable(std::vector<Descriptor>& configs, const Rules& rules, cudnnHandle_t handle,
                                       std::string& why) {
  std::vector<std::optional<EngineNotes>> notes;
  for (const Descriptor& config : configs) notes.push_back(engine_notes(config));
  std::vector<bool> tried(configs.size(), false);
  auto passed_over = [&](size_t i, const std::string& reason) {
    why += "\n  engine " + std::to_string(notes[i] ? notes[i]->index : -1) + ": " + reason;
  };
  for (bool deterministic_only : {true, false}) {
    for (bool compiled_at_run_time : {false, true}) {
      for (size_t i = 0; i < configs.size(); ++i) {
        if (tried[i] || configs[i].get() == nullptr) continue;
        if (!notes[i]) {
          tried[i] = true;
          passed_over(i, "its notes cannot be read");
          continue;
        }
        if (notes[i]->runtime_compiled != compiled_at_run_time) continue;
        const char* broken = broken_rule(notes[i]->numerical, notes[i]->numerical_count, rules, deterministic_only);
        if (broken != nullptr) {
          if (!deterministic_only) {
            tried[i] = true;
            passed_over(i, broken);
          }
          continue;
        }
        tried[i] = true;
        // The configuration's own workspace figure, when it has one, spares
        // finalizing a plan that would be refused for its size.
        int64_t workspace = 0, got = 0;
        if (cudnnBackendGetAttribute(configs[i].get(), CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                     &workspace) == CUDNN_STATUS_SUCCESS &&
            static_cast<size_t>(workspace) > kMaxConvWorkspaceBytes) {
          passed_over(i, "workspace of " + std::to_string(workspace) + " bytes");
          continue;
        }
        Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
        const cudnnStatus_t finalized = plan.try_finalize();
        if (finalized != CUDNN_STATUS_SUCCESS) {  // this configuration cannot run here
          passed_over(i, "plan not finalized: " + status_text(finalized));
          continue;
        }
        const cudnnStatus_t status = cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                              CUDNN_TYPE_INT64, 1, &got, &workspace);
        if (status != CUDNN_STATUS_SUCCESS) fail(status, "cudnnBackendGetAttribute (plan's workspace size)");
        if (workspace < 0 || static_cast<size_t>(workspace) > kMaxConvWorkspaceBytes) {
          passed_over(i, "plan's workspace of " + std::to_string(workspace) + " bytes");
          continue;
        }
        return Chosen{std::move(configs[i]), std::move(plan), workspace};
      }
    }
  }
  return std::nullopt;
}

// The first acceptable engine configuration of cuDNN's rankings, finalized
// into a plan; none when no configuration is acceptable and finalizes, or
// cuDNN declines the graph (`why` says which).
std::shared_ptr<const Plan> build_plan(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                                       const Conv2dParams& p, const Conv2dShape& s, const Rules& rules,
                                       cudnnHandle_t handle, std::string& why) {
  try {
    GraphParts parts = operation_graph(direction, x, w, y, p, s, handle);
    // Heuristics mode A ranks the engines; the fallback mode lists more
    // general ones after them, so that a deterministic engine of either comes
    // before a non-deterministic one of A.
    std::vector<Descriptor> configs = engine_configs(parts.graph, CUDNN_HEUR_MODE_A);
    for (Descriptor& config : engine_configs(parts.graph, CUDNN_HEUR_MODE_FALLBACK)) {
      configs.push_back(std::move(config));
    }
    if (configs.empty()) why += "\n  the heuristics offer no engine";
    std::optional<Chosen> chosen = first_acceptable(configs, rules, handle, why);
    if (!chosen) return nullptr;
    return std::make_shared<const Plan>(Plan{std::move(parts), std::move(*chosen)});
  } catch (const Declined& declined) {
    why += "\n  " + declined.why;
    return nullptr;
  }
}

// KILN_CUDNN_GRAPH_DEBUG: why a key goes to the legacy API.
void report_decline(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                    const std::string& why) {
  if (!debug_declines()) return;
  static const char* const kNames[] = {"forward", "backward data", "backward filter"};
  std::fprintf(stderr, "cuDNN graph API: %s of %s x %s -> %s (%s) goes to the legacy API:%s\n",
               kNames[static_cast<int>(direction)], kiln::detail::str(x.shape()).c_str(),
               kiln::detail::str(w.shape()).c_str(), kiln::detail::str(y.shape()).c_str(),
               std::string(dtype_name(x.dtype())).c_str(), why.c_str());
}

// Plans by key and handle; a null plan marks a key the legacy API runs.
class PlanCache {
 public:
  // The cached entry: found (the plan or null) or not.
  std::pair<bool, std::shared_ptr<const Plan>> find(const std::vector<int64_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = plans_.find(key);
    if (found == plans_.end()) return {false, nullptr};
    return {true, found->second};
  }
  void put(const std::vector<int64_t>& key, std::shared_ptr<const Plan> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_[key] = std::move(plan);
  }

 private:
  std::mutex mutex_;
  std::map<std::vector<int64_t>, std::shared_ptr<const Plan>> plans_;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache;  // never destroyed: plans outlive static destruction (Note [Library handles])
  return *cache;
}

}  // namespace

int64_t cudnn_graph_runs() { return graph_runs.load(std::memory_order_relaxed); }

bool run_with_graph_api(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                        const Conv2dParams& p, const Conv2dShape& s, cudnnHandle_t handle, bool allow_tf32,
                        const std::vector<int64_t>& key) {
  std::vector<int64_t> plan_key = key;
  plan_key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(handle)));
  auto [found, plan] = plan_cache().find(plan_key);
  if (!found) {
    std::string why;
    plan = build_plan(direction, x, w, y, p, s, Rules{x.dtype(), allow_tf32}, handle, why);
    plan_cache().put(plan_key, plan);
    if (!plan) report_decline(direction, x, w, y, why);
  }
  if (!plan) return false;

  const int64_t workspace_bytes = plan->chosen.workspace_bytes;
  const Tensor scratch = workspace_bytes > 0 ? Tensor::empty({workspace_bytes}, {DType::UInt8, x.device()}) : Tensor();
  void* workspace = scratch.defined() ? scratch.data_ptr() : nullptr;
  void* pointers[3] = {x.data_ptr(), w.data_ptr(), y.data_ptr()};
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string declined;
  try {
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, {kX, kW, kY});
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack.finalize("variant pack");
    status = cudnnBackendExecute(handle, plan->chosen.plan.get(), pack.get());
  } catch (const Declined& d) {
    declined = d.why;
  }
  // A decline, or any failure of a plan's first run (as PyTorch moves on to
  // its next configuration then), sends the key to the legacy API.
  if (declined.empty() && status != CUDNN_STATUS_SUCCESS && (!found || cudnn_declined(status))) {
    declined = "cudnnBackendExecute: " + status_text(status);
  }
  if (!declined.empty()) {
    plan_cache().put(plan_key, nullptr);
    report_decline(direction, x, w, y, "\n  " + declined);
    return false;
  }
  if (status != CUDNN_STATUS_SUCCESS) fail(status, "cudnnBackendExecute");
  graph_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace kiln::cuda
