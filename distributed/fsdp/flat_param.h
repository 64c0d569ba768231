// FlatParamUnit: one FSDP unit's parameters as one flat buffer, sharded.
//
// Note [FSDP flat units]
// A unit's parameters are laid end to end in one flat buffer, in the order
// the module lists them, and the buffer is padded and cut into S equal
// shards, one per rank of the shard group (Note [FSDP sharding strategies]
// in fully_sharded_data_parallel.h):
//
//   flat (padded to S * shard_numel):  | w1 ......... | b1 | w2 ....... | pad |
//   rank 0's shard:                    | ........ |
//   rank 1's shard:                               | ......... |
//   rank 2's shard:                                           | ......... |
//
// - Gathering is one all_gather_into_tensor of the shards into a full
//   buffer; every parameter is then a view of its range in it, so no
//   element is copied after the collective (per-parameter shards, as
//   torch's newer fully_shard keeps them, would interleave the ranks'
//   pieces and need a copy out of every gather and into every reduction).
// - Reducing is the mirror image: the unit's gradients sit in one flat
//   buffer of the same layout (Note [FSDP gradients in place]) and
//   reduce_scatter_tensor leaves each rank the sum of its own shard, divided
//   by the world size.
// - Each parameter keeps its TensorImpl, the handle that the model, the
//   optimizer and autograd hold; TensorImpl::set_storage (Note [Swapping a
//   tensor's storage]) points it at its full-shape view of the gathered
//   buffer before forward and backward, and back at its part of this rank's
//   shard afterwards: the elements [a, b) of the parameter flattened that
//   fall in the shard, a 1-d tensor that may hold no elements at all. The
//   optimizer steps that part, its gradient is the same range of the flat
//   gradient shard, and its state (Adam's moments) has that size: so the
//   optimizer state is sharded with no change to any optimizer.
// - Between forward and backward a parameter saved for backward (Linear
//   saves its weight) is the same handle: swapped to the shard after
//   forward and to a fresh gathered buffer before backward, it reads the
//   same values, and as a swap is not a write the version check passes.
//   Freeing the gathered buffer frees its memory because nothing but these
//   handles viewed it.
//
// Note [FSDP gradients in place]
// When a unit's backward begins, each parameter's .grad() is set to a zero
// view of its range in a flat gradient buffer, so that autograd's
// accumulation (Note [Gradient accumulation]) adds each incoming gradient
// into the buffer the reduce-scatter reads: no full-size gradient of the
// unit exists beside it, and nothing is copied before the collective. The
// price is zeroing the buffer, a pass over memory that a copy would also
// have made. Under no_sync the buffer is kept and the next backward adds to
// it; a gradient that someone replaced (a hook returning a new tensor) is
// copied in before the reduction.
//
// Note [FSDP unit padding]
// Collectives match by order: if one rank skips a unit's forward, its next
// all-gather meets its peers' gather of another unit. A GPT's blocks are of
// equal size, so nothing in the bytes would differ and the ranks would
// train on each other's layers. Each unit's shard is therefore padded to a
// size no other unit's has: the smallest shard_numel >= ceil(numel / S)
// with shard_numel % U == unit index, for U units. The padding costs fewer
// than U elements per rank, and any two different units' collectives
// differ in element count, which the backend's always-on agreement check
// (Note [Always-on collective agreement]) compares on every call: a rank out
// of step fails every rank within milliseconds, and FSDP adds the unit's
// name to the error.
//
// Note [FSDP mixed precision]
// The shards stay in the parameters' dtype (float32): they are what the
// optimizer steps and what a checkpoint saves. With a param_dtype of
// bfloat16, a gather first casts this rank's shard to bfloat16 and gathers
// that, so the collective moves half the bytes, and the parameters are
// swapped to bfloat16 views of the gathered buffer (set_storage takes the
// source's dtype): forward and backward compute in bfloat16, and the
// gradients arrive in bfloat16. They are reduced in reduce_dtype (the sum
// of W gradients in bfloat16 loses bits, so float32 is the careful choice)
// and each rank's gradient shard is cast back to the master dtype. With
// cpu_offload the shards and their gradients live in host memory; a gather
// copies the shard to the compute device first and the gradient shard
// comes back to the host after the reduction, so the optimizer steps on the
// host.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace kiln::distributed::fsdp {

// What every unit of one FSDP instance shares.
struct UnitContext {
  std::shared_ptr<ProcessGroup> shard_group;      // null: S = 1
  std::shared_ptr<ProcessGroup> replicate_group;  // null: R = 1
  int shard_size = 1;                             // S
  int shard_rank = 0;                             // this rank in the shard group
  int world_size = 1;                             // S * R: what gradients are averaged over
  size_t unit_count = 1;                          // U, for Note [FSDP unit padding]
  std::optional<DType> param_dtype;               // what to compute in; unset: the master dtype
  std::optional<DType> reduce_dtype;              // what to reduce in; unset: the compute dtype
  bool cpu_offload = false;
  Device compute_device = kCPU;
};

class FlatParamUnit {
 public:
  // One parameter of the unit: its range in the flat buffer.
  struct Member {
    std::string name;  // in the wrapped module
    Tensor param;      // the handle, swapped between its shard and its full view
    Shape shape;       // the full shape
    int64_t offset = 0;  // first element in the flat buffer
    int64_t numel = 0;
    // This rank's part: the parameter's flattened elements [local_begin, local_end).
    int64_t local_begin = 0;
    int64_t local_end = 0;
  };

  enum class State {
    Sharded,    // parameters are their shard parts; no full buffer
    Gathering,  // an all-gather is in flight
    Gathered,   // parameters are full views of the gathered buffer
  };

  // Flattens `params` (full tensors, one dtype and device) into this rank's
  // shard and points each at its part of it; the full storage is released
  // once nobody else holds it. `index` is the unit's number and `name` its
  // module's ("" for the root unit), for errors.
  FlatParamUnit(size_t index, std::string name, const std::vector<std::pair<std::string, Tensor>>& params,
                UnitContext context);

  size_t index() const { return index_; }
  const std::string& name() const { return name_; }
  // "unit 3 'transformer.h.2'" or "the root unit", for messages.
  std::string describe() const;
  const std::vector<Member>& members() const { return members_; }
  int64_t numel() const { return numel_; }
  int64_t shard_numel() const { return shard_numel_; }
  State state() const { return state_; }
  // Whether forward and backward need a gather at all: not when every rank
  // holds the whole unit in the compute dtype on the compute device (NO_SHARD
  // without mixed precision or offload), where the parameters stay views of
  // the shard throughout.
  bool needs_gather() const { return needs_gather_; }
  // The master dtype (that of the shard, the optimizer and checkpoints).
  DType dtype() const { return dtype_; }
  // Where forward and backward run, and where the shard lives (the host
  // under cpu_offload).
  Device compute_device() const { return context_.compute_device; }
  Device storage_device() const { return storage_device_; }

  // Starts the all-gather of the shards (nothing if gathered or gathering).
  void start_gather();
  // Waits for it and points the parameters at their full views (starts it
  // first if nobody has).
  void finish_gather();
  // Whether an issued gather's data has arrived (true when not gathering).
  bool gather_complete() const;
  // Points the parameters back at their shard parts and frees the full buffer.
  void reshard();
  // While gathered: copies this rank's part of the full parameters (which
  // someone may have changed) back into the shard, converting to the master
  // dtype.
  void write_back_full();

  // Before the unit's backward: puts aside the parameters' current
  // gradients (of the shard's shape, from a backward without zero_grad: a
  // full-shape gradient cannot be added to them; finish_reduce adds them
  // back), and makes each parameter's .grad() a zero view of a flat buffer
  // of the unit's layout, into which backward accumulates in place (Note
  // [FSDP gradients in place]).
  void prepare_gradients();
  // With `sync`, starts reducing the flat gradient buffer (a parameter whose
  // gradient someone replaced is copied in first); without (no_sync), keeps
  // it, so that the next backward adds to it. Clears the parameters'
  // gradients either way. Parameters without a gradient count as zeros.
  void start_reduce(bool sync);
  bool reduce_pending() const { return reduce_in_flight_; }
  // Waits for the reduction, averages, and gives each parameter that
  // requires grad its part of the gradient shard (plus any stashed
  // gradient) as its .grad(): at once, or when the unit reshards if it is
  // still gathered (a unit with frozen parameters reshards last).
  void finish_reduce();

  // The part of the gradient norm held here: sum over this rank's gradient
  // elements of |g|^p (or the max |g| for p = inf), in float64.
  double local_grad_norm_term(double p) const;

 private:
  // Runs fn, adding this unit to any kiln::Error it throws.
  template <class F>
  auto naming_errors(const char* what, F&& fn) -> decltype(fn());
  Tensor shard_part(const Member& m, const Tensor& flat_shard) const;

  size_t index_;
  std::string name_;
  UnitContext context_;
  std::vector<Member> members_;
  DType dtype_;
  Device storage_device_;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
  bool needs_gather_ = true;
  State state_ = State::Sharded;

  Tensor shard_;        // (shard_numel) master dtype, on the storage device
  Tensor full_;         // (S * shard_numel) compute dtype, on the compute device; while gathered
  Tensor gather_send_;  // the shard as sent (cast / copied), alive while gathering
  WorkPtr gather_work_;

  Tensor grad_stash_;           // (shard_numel) master dtype: gradients from before this backward
  Tensor flat_grad_;            // (S * shard_numel) reduce dtype: this backward's gradients (and no_sync's)
  Tensor reduce_input_;         // (S * shard_numel) reduce dtype: alive while reducing
  Tensor reduce_output_;        // (shard_numel) reduce dtype
  Tensor pending_grad_shard_;   // (shard_numel) master dtype: reduced, not yet handed out
  void assign_gradients();
  WorkPtr reduce_work_;
  bool reduce_in_flight_ = false;
};

}  // namespace kiln::distributed::fsdp
