// The autocast state, its guard, the casting policies and the region's
// cache of parameter copies (Note [Autocast] in autograd/autocast.h).
#include "autograd/autocast.h"

#include <memory>
#include <unordered_map>

#include "autograd/function.h"
#include "autograd/grad_mode.h"

namespace kiln {

namespace {

struct AutocastState {
  bool enabled = false;
  DType dtype;
};

// Indexed by DeviceType; the defaults are torch's.
thread_local std::array<AutocastState, kNumDeviceTypes> t_state = {
    AutocastState{false, DType::BFloat16},  // CPU
    AutocastState{false, DType::Float16},   // CUDA
};
thread_local int t_enabled_count = 0;  // device types with autocast on
thread_local int t_nesting = 0;        // open AutocastGuards, enabled or not
thread_local bool t_cache_enabled = true;

// A parameter's lower-precision copy, valid while the parameter lives, has
// the version it had when copied and still sits in the memory it was copied
// from: set_storage (FSDP moving it between its shard and a gathered buffer)
// changes the memory and the shape but not the version (Note [Swapping a
// tensor's storage]).
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  uint64_t version;
  std::weak_ptr<Storage> storage;
  int64_t offset;
  Shape strides;
  Tensor copy;  // detached: each use records its own cast node

  bool still_copies(const Tensor& t, DType dtype) const {
    return source.lock() == t.impl_ptr() && version == t.version() && storage.lock() == t.storage() &&
           offset == t.storage_offset() && strides == t.strides() && copy.shape() == t.shape() &&
           copy.dtype() == dtype;
  }
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> t_cache;

AutocastState& state_of(DeviceType device_type) { return t_state[static_cast<size_t>(device_type)]; }

void check_dtype(DType dtype) {
  KILN_CHECK(dtype == DType::Float16 || dtype == DType::BFloat16,
             "autocast: the autocast dtype must be float16 or bfloat16, got ", dtype);
}

// Floating, not float64 and on the device type: what torch's autocast casts.
bool eligible(const Tensor& t, DeviceType device_type) {
  return t.defined() && t.is_floating_point() && t.dtype() != DType::Float64 && t.device().type == device_type;
}

// `source` (float32, a leaf that requires grad) as `dtype`, through the
// cache: the conversion runs once per version and dtype (nested guards may
// ask for both 16-bit types), and each call records a node from the shared
// copy back to `source`.
Tensor cached_cast(const Tensor& source, DType dtype) {
  const TensorImpl* key = source.impl_ptr().get();
  auto it = t_cache.find(key);
  if (it == t_cache.end() || !it->second.still_copies(source, dtype)) {
    Tensor copy = autograd::untracked([&] { return source.to(dtype); });
    it = t_cache
             .insert_or_assign(key, CachedCast{source.impl_ptr(), source.version(), source.storage(),
                                               source.storage_offset(), source.strides(), copy})
             .first;
  }
  Tensor use = it->second.copy.detach();
  autograd::record("to", {source}, {use}, [source_dtype = source.dtype()](const autograd::TensorList& g) {
    return autograd::TensorList{g[0].to(source_dtype)};
  });
  return use;
}

Tensor cast(const Tensor& t, DType dtype, bool lower_precision) {
  bool cacheable = lower_precision && t_cache_enabled && t.dtype() == DType::Float32 && GradMode::is_enabled() &&
                   t.requires_grad() && t.is_leaf();
  return cacheable ? cached_cast(t, dtype) : t.to(dtype);
}

}  // namespace

bool autocast_enabled(DeviceType device_type) { return state_of(device_type).enabled; }

DType autocast_dtype(DeviceType device_type) { return state_of(device_type).dtype; }

void set_autocast_enabled(DeviceType device_type, bool enabled) {
  AutocastState& state = state_of(device_type);
  if (state.enabled != enabled) t_enabled_count += enabled ? 1 : -1;
  state.enabled = enabled;
}

void set_autocast_dtype(DeviceType device_type, DType dtype) {
  check_dtype(dtype);
  state_of(device_type).dtype = dtype;
}

void clear_autocast_cache() { t_cache.clear(); }

AutocastGuard::AutocastGuard(DeviceType device_type, DType dtype, bool enabled, bool cache_enabled)
    : device_type_(device_type),
      previous_enabled_(autocast_enabled(device_type)),
      previous_dtype_(autocast_dtype(device_type)),
      previous_cache_enabled_(t_cache_enabled) {
  check_dtype(dtype);
  set_autocast_enabled(device_type, enabled);
  set_autocast_dtype(device_type, dtype);
  t_cache_enabled = cache_enabled;
  ++t_nesting;
}

AutocastGuard::AutocastGuard(DeviceType device_type, bool enabled)
    : AutocastGuard(device_type, autocast_dtype(device_type), enabled, t_cache_enabled) {}

AutocastGuard::~AutocastGuard() {
  set_autocast_enabled(device_type_, previous_enabled_);
  state_of(device_type_).dtype = previous_dtype_;
  t_cache_enabled = previous_cache_enabled_;
  if (--t_nesting == 0) clear_autocast_cache();
}

namespace autograd {

bool any_autocast_enabled() { return t_enabled_count > 0; }

bool autocast_cast(AutocastPolicy policy, std::span<Tensor> args) {
  const Tensor* first = nullptr;
  for (const Tensor& t : args) {
    if (t.defined()) {
      first = &t;
      break;
    }
  }
  if (first == nullptr) return false;
  const DeviceType device_type = first->device().type;
  const AutocastState& state = state_of(device_type);
  if (!state.enabled) return false;

  DType target = state.dtype;
  if (policy == AutocastPolicy::Float32) {
    target = DType::Float32;
  } else if (policy == AutocastPolicy::Promote) {
    // torch's promote_type: the widest of the autocast dtype and the
    // eligible arguments' dtypes.
    for (const Tensor& t : args) {
      if (eligible(t, device_type)) target = promote_types(target, t.dtype());
    }
  }
  bool changed = false;
  for (Tensor& t : args) {
    if (!eligible(t, device_type) || t.dtype() == target) continue;
    t = cast(t, target, policy == AutocastPolicy::LowerPrecision);
    changed = true;
  }
  return changed;
}

}  // namespace autograd

}  // namespace kiln
