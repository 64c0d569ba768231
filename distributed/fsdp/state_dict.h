// State dicts of a model trained under FSDP, and of its optimizer: full ones
// (gathered, for one process or PyTorch) and sharded checkpoints that load
// on any number of ranks.
//
//   // every rank, every few hundred steps:
//   fsdp::save_sharded_checkpoint("ckpt/step-500", *model, &opt, {{"step", "500"}});
//   // a later job, on any number of ranks (or one process, over the plain model):
//   fsdp::load_sharded_checkpoint("ckpt/step-500", *model, &opt);
//   // a file PyTorch loads, written by rank 0:
//   TensorDict full = fsdp::full_state_dict(*model);
//   if (rank == 0) save_safetensors("model.safetensors", full);
//
// Note [FSDP checkpoint contents]
// A sharded checkpoint (Note [Sharded checkpoint layout] in
// distributed/checkpoint/sharded_checkpoint.h) of a model and optimizer
// holds, by name rather than by position, so that a different world size,
// wrap policy or sharding strategy (each of which moves every shard
// boundary) loads it:
//   model.<parameter name>                  each parameter, its global shape;
//                                           every rank writes the elements of
//                                           its shard ([offset, offset +
//                                           local_numel) of ParamShard)
//   model.<buffer name>                     persistent buffers, whole, by rank 0
//   optimizer.state.<parameter name>.<entry>  per-element state (Adam's
//                                           exp_avg) with the parameter's
//                                           global shape and shard ranges;
//                                           single-number state (Adam's step),
//                                           0-dim, by the rank holding the
//                                           parameter's first element
//   optimizer.param_groups.<g>.<name>       each hyperparameter, 0-dim float64,
//                                           by rank 0 (with initial_lr if set)
// and in the metadata "optimizer" (its name, "Adam"),
// "optimizer.param_groups" (a JSON list, per group, of its parameters'
// names) and "optimizer.scalar_state" (a JSON list of the single-number
// entries). Only ParamShard::writer ranks write pieces, so replicas
// (NO_SHARD, HYBRID_SHARD) write nothing twice. A tied parameter is saved
// once, under the first of its names, as named_parameters() lists it.
// Loading reads, on each rank, exactly its shard's range of each tensor and
// fills the optimizer through its public load_state_dict, with state tensors
// shaped as the parameters are now (a 1-d shard under FSDP, the full shape
// in one process), so that no optimizer knows about sharding.
#pragma once

#include <map>
#include <string>

#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "tensor/tensor_dict.h"

namespace kiln::distributed::fsdp {

// The wrapped module's state dict, as its own state_dict() names it (no
// "module." prefix; parameters, tied ones under each name, and persistent
// buffers), with full parameters in their master dtype, as new CPU tensors.
// Collective over fsdp.group(). With rank0_only, ranks other than 0 get an
// empty dict. What a plain module's load_state_dict takes, and, through
// save_safetensors, what PyTorch's load_state_dict takes.
TensorDict full_state_dict(FullyShardedDataParallel& fsdp, bool rank0_only = true);

// `optimizer`'s state dict (Note [Optimizer state dict]) as if it had been
// built over the unsharded model: per-element state of each parameter's
// full shape, parameters numbered as in the optimizer. Loadable by the same
// kind of optimizer built over a plain module's parameters in the same
// order. Collective; empty off rank 0 with rank0_only. Every rank's
// optimizer must hold state for the same parameters (checked).
TensorDict full_optimizer_state_dict(FullyShardedDataParallel& fsdp, const optim::Optimizer& optimizer,
                                     bool rank0_only = true);

// Collective over fsdp.group(): writes the model's parameters and buffers,
// and the optimizer's state and hyperparameters when `optimizer` is given,
// to the sharded checkpoint `dir` (Note [FSDP checkpoint contents]). Call
// it between steps (not inside forward or backward). `metadata` keys may
// not start with "optimizer". The optimizer's parameters must all be
// parameters of the wrapped module.
void save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata = {});
// Fills this rank's shards of the parameters, the buffers, and the
// optimizer (its state and hyperparameters) from `dir`, whatever world size,
// wrapping or strategy wrote it. No collectives. Throws naming the tensor
// when something is missing or shaped otherwise, and when the optimizer is
// of another kind or groups its parameters differently from the saved one;
// then the optimizer is unchanged (the model may be part loaded).
void load_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, optim::Optimizer* optimizer);

// The same for a module in one process (every parameter whole): a
// checkpoint of world size 1 that FSDP on any number of ranks loads, and
// that loads any FSDP checkpoint. Given a FullyShardedDataParallel, they
// call the overloads above.
void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata = {});
void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer);

// The metadata a checkpoint was saved with, without the optimizer's own
// entries: what a trainer reads back (its step, its recipe).
std::map<std::string, std::string> checkpoint_metadata(const std::string& dir);

}  // namespace kiln::distributed::fsdp
