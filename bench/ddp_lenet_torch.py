#!/usr/bin/python3
"""The PyTorch anchor of bench/ddp_lenet.cpp: LeNet-5 under PyTorch's DDP, timed.

The same workload as bench/ddp_lenet.cpp: the LeNet of scripts/lenet_torch.py
wrapped in torch.nn.parallel.DistributedDataParallel (default buckets:
bucket_cap_mb 25 and a 1 MiB first bucket, so LeNet's 248 KB of gradients go
in one all-reduce per step), SGD lr 0.01 momentum 0.9,
zero_grad(set_to_none=True); global batch 64, 64 / world images per rank and
step, each rank's images taken by index from the in-memory, normalised
training set in the order of a torch.utils.data.DistributedSampler
(shuffled with seed 0 + epoch; torch's permutation, not Kiln's, which does
not change the speed); gloo, torch.set_num_threads(1) in every rank. WARMUP
steps, then --steps steps (default one epoch) timed between a barrier and rank
0's last optimizer step. Rank 0 prints one line:

    ddp_lenet_torch world=2 batch_per_rank=32 steps=781 images_per_second=..
                    forward_ms=.. backward_ms=.. optimizer_ms=.. loss_last100=..
                    hidden_share_sampled=.. comm_span_ms_sampled=..

where backward_ms includes DDP's all-reduce and the wait for it, and the last
two are DDP's own timings of a few sampled steps (sampled_overlap).

The ranks start either way:
- without RANK in the environment it starts --world processes of itself,
  which meet through init_method="file://..." in a temporary folder, as
  bench/ddp_lenet.cpp's driver does;
- with RANK set (`/usr/bin/python3 -m torch.distributed.run --nproc_per_node
  2 bench/ddp_lenet_torch.py ...`) it is that rank and meets through env://.

Usage: /usr/bin/python3 bench/ddp_lenet_torch.py [--world N] [--steps S] [--cifar DIR] [--train-images N]
       (default: world 2, 10,000 synthetic images; --cifar DIR: all 50,000 CIFAR-10 training images)
"""

import argparse
import importlib.util
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
# scripts/ goes first: bench/ (this file's folder, already on sys.path) has a
# lenet_torch.py of its own, the single-process benchmark.
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from lenet_torch import LeNet  # noqa: E402
from rank_processes import init_rank_process_group, run_self_on_ranks  # noqa: E402


def _single_process_bench():
    """bench/lenet_torch.py, for its data loaders, under a name that does not shadow the model's module."""
    spec = importlib.util.spec_from_file_location("lenet_bench", os.path.join(HERE, "lenet_torch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GLOBAL_BATCH = 64
WARMUP_STEPS = 5
LOSS_STEPS = 100


def load_data(args):
    bench = _single_process_bench()
    if not args.cifar:
        return bench.make_data(args.train_images or 10000, 1)
    return bench.load_cifar(args.cifar, True, args.train_images or 50000)


def sampled_overlap(model):
    """PyTorch's own measure of bench/ddp_lenet.cpp's hidden share, from DDP's logger.

    The reducer times a step's communication from its first bucket's launch to
    the end of its last all-reduce, and the overlap from that launch to the end
    of backward's computation: overlap / communication is the share hidden
    behind backward. It samples only some iterations (the first ten, then one
    in every 100), so these are averages over a few steps. (nan, nan) where
    this PyTorch's DDP does not log them.
    """
    try:
        data = model._get_ddp_logging_data()
        comm = data["avg_backward_comm_time"]
        return data["avg_backward_compute_comm_overlap_time"] / comm, comm / 1e6
    except (AttributeError, KeyError, ZeroDivisionError):
        return float("nan"), float("nan")


def run_rank(args):
    torch.set_num_threads(1)
    init_rank_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    if GLOBAL_BATCH % world:
        sys.exit(f"ddp_lenet_torch: the world size {world} must divide the global batch {GLOBAL_BATCH}")
    batch = GLOBAL_BATCH // world

    images, labels = load_data(args)
    sampler = torch.utils.data.DistributedSampler(range(len(images)), num_replicas=world, rank=rank, shuffle=True,
                                                  seed=0)
    steps_per_epoch = len(sampler) // batch
    steps = args.steps or steps_per_epoch
    orders = {}

    def indices(step):
        epoch = step // steps_per_epoch
        if epoch not in orders:
            sampler.set_epoch(epoch)
            orders.clear()
            orders[epoch] = torch.tensor(list(sampler), dtype=torch.int64)
        at = (step % steps_per_epoch) * batch
        return orders[epoch][at:at + batch]

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(LeNet())
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    times = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    loss_sum = 0.0

    def step(s, timed):
        nonlocal loss_sum
        start = time.perf_counter()
        index = indices(s)
        x = images.index_select(0, index)  # (batch, 3, 32, 32)
        y = labels.index_select(0, index)  # (batch,)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        forward_done = time.perf_counter()
        loss.backward()
        backward_done = time.perf_counter()
        optimizer.step()
        if not timed:
            return
        times["forward"] += forward_done - start
        times["backward"] += backward_done - forward_done
        times["optimizer"] += time.perf_counter() - backward_done
        if s >= steps - LOSS_STEPS:
            loss_sum += loss.item()

    for s in range(WARMUP_STEPS):
        step(s, False)
    dist.barrier()
    start = time.perf_counter()
    for s in range(steps):
        step(s, True)
    seconds = time.perf_counter() - start
    if rank == 0:
        ms = 1e3 / steps
        hidden, comm_ms = sampled_overlap(model)
        print(f"ddp_lenet_torch world={world} batch_per_rank={batch} steps={steps} "
              f"images_per_second={steps * GLOBAL_BATCH / seconds:.0f} forward_ms={times['forward'] * ms:.3f} "
              f"backward_ms={times['backward'] * ms:.3f} optimizer_ms={times['optimizer'] * ms:.3f} "
              f"loss_last100={loss_sum / min(steps, LOSS_STEPS):.4f} "
              f"hidden_share_sampled={hidden:.3f} comm_span_ms_sampled={comm_ms:.3f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2, help="ranks the driver starts (not with RANK set)")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default: one epoch)")
    parser.add_argument("--cifar", help="a CIFAR-10 binary folder (default: synthetic data)")
    parser.add_argument("--train-images", type=int, default=0,
                        help="images to train on (default: 10000 synthetic, or 50000 of --cifar)")
    args = parser.parse_args()
    if args.world < 1 or GLOBAL_BATCH % args.world:
        parser.error(f"--world must divide the global batch {GLOBAL_BATCH}")
    if args.steps < 0 or (args.train_images and args.train_images < GLOBAL_BATCH):
        parser.error(f"--steps must be >= 1 and --train-images >= {GLOBAL_BATCH}")
    if "RANK" in os.environ:
        run_rank(args)
    else:
        run_self_on_ranks(args.world, "ddp_lenet_torch")


if __name__ == "__main__":
    main()
