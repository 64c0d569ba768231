"""The anchor of bench/allreduce.cpp: PyTorch's gloo all_reduce timed the same way.

Run by build/bench/allreduce once per rank, with RANK, WORLD_SIZE and
KILN_BENCH_STORE (a file:// init method) in the environment; prints one line
per size, "bytes=<n> seconds=<mean seconds per all_reduce>", on rank 0.
Usage (normally through the C++ driver):
  RANK=0 WORLD_SIZE=2 KILN_BENCH_STORE=file:///tmp/x KILN_BENCH_SIZES=4096,65536 \
    /usr/bin/python3 bench/allreduce_torch.py
"""
import os
import time

import torch
import torch.distributed as dist


def time_all_reduce(tensor, budget_seconds, warmup):
    for _ in range(warmup):
        dist.all_reduce(tensor)
    # Every rank must run the same number of iterations, so rank 0 decides
    # from a first timed pass and broadcasts the count.
    start = time.perf_counter()
    dist.all_reduce(tensor)
    once = time.perf_counter() - start
    count = torch.tensor([max(3, min(1000, int(budget_seconds / max(once, 1e-6))))], dtype=torch.int64)
    dist.broadcast(count, 0)
    iterations = int(count.item())
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / iterations


def main():
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=os.environ["KILN_BENCH_STORE"], rank=rank, world_size=world)
    budget = float(os.environ.get("KILN_BENCH_BUDGET", "0.25"))
    for size in [int(s) for s in os.environ["KILN_BENCH_SIZES"].split(",")]:
        tensor = torch.ones(size // 4, dtype=torch.float32)
        seconds = time_all_reduce(tensor, budget, warmup=2)
        if rank == 0:
            print(f"bytes={size} seconds={seconds:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
