// Kiln's distributed training in one include: process groups and stores,
// init_process_group, the differentiable collectives, and the strategies:
// DataParallel, DistributedDataParallel (with its communication hooks and
// SyncBatchNorm), ZeRO, FullyShardedDataParallel with its sharded
// checkpoints, and pipeline parallelism (docs/ARCHITECTURE.md, distributed/).
// The backends stay behind ProcessGroup: init_process_group("gloo" | "nccl" |
// "mpi", ...) picks one, in whichever build has it.
//
//   #include <kiln.h>
//   #include <kiln/distributed.h>
#pragma once

#include "kiln.h"

#include "distributed/checkpoint/sharded_checkpoint.h"
#include "distributed/data_parallel.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/powersgd_hook.h"
#include "distributed/ddp/sync_batch_norm.h"
#include "distributed/ddp/training_helpers.h"
#include "distributed/file_store.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "distributed/fsdp/state_dict.h"
#include "distributed/functional.h"
#include "distributed/init.h"
#include "distributed/memory_report.h"
#include "distributed/pipeline/pipe.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/schedule.h"
#include "distributed/process_group.h"
#include "distributed/store.h"
#include "distributed/tcp_store.h"
#include "distributed/work.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
