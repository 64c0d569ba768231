"""The PyTorch anchor of bench/fsdp.cpp: GPT training under PyTorch's FSDP, timed.

The same workload as bench/fsdp.cpp: scripts/gpt_torch.py's GPT (nanoGPT's
architecture; bias off, dropout 0, tied LM head) of a named config (small: 4
layers, 4 heads, width 128, block 128, global batch 32; baby: 6, 6, 384, 256,
64) on random token windows (vocabulary 65, generator seeded 1, the same
windows on every rank; rank r of N trains on rows [r B / N, (r + 1) B / N) of
each global batch of B), AdamW (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on
the 2-d weights only), float32, zero_grad(set_to_none=True). The model is
sharded with FSDP2, torch.distributed.fsdp.fully_shard, applied to every
transformer block and then to the root (the FULL_SHARD behaviour:
reshard_after_forward=True; FSDP2 prefetches the next block's all-gather in
forward and backward by itself); the optimizer is made after sharding, over
the sharded parameters, as FSDP2 requires. gloo on the CPU,
torch.set_num_threads(1) in every rank.

--warmup steps run first; then --steps steps, each timed on rank 0 from its
start to the end of its optimizer step; tok_s is the global tokens of one
step over the median step time.

Memory: PyTorch's CPU allocator keeps no count of its bytes, so the peak is
the growth of the process's resident memory from just before the model is
built to the end of training (the peak resident size, getrusage's ru_maxrss,
minus the resident size before the model), the largest over the ranks.
bench/fsdp.cpp reports the same measure for Kiln as rss_peak_mib beside its
allocator's peak. Resident memory also counts what the allocator keeps
cached and the libraries' own buffers, so it is an upper bound of the bytes
the tensors need.

Rank 0 prints one line:

    fsdp_torch world=2 config=small batch_per_rank=16 steps=20 tok_s=.. step_ms=.. rss_peak_mib=.. loss_last=..

The ranks start either way:
- without RANK in the environment it starts --world processes of itself,
  which meet through init_method="file://..." in a temporary folder;
- with RANK set (torchrun's environment) it is that rank and meets through env://.

Usage: python bench/fsdp_torch.py [--world N] [--config small|baby] [--steps N] [--warmup N] [--batch B]
"""

import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from gpt_torch import GPT, Block, GPTConfig  # noqa: E402
from rank_processes import init_rank_process_group, run_self_on_ranks  # noqa: E402

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # PyTorch 2.4 and 2.5 kept FSDP2 under _composable
    from torch.distributed._composable.fsdp import fully_shard

CONFIGS = {
    # name: (n_layer, n_head, n_embd, block_size, global batch)
    "small": (4, 4, 128, 128, 32),
    "baby": (6, 6, 384, 256, 64),
}
VOCAB = 65


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGESIZE")


def peak_resident_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def run_rank(args):
    torch.set_num_threads(1)
    init_rank_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    n_layer, n_head, n_embd, block, global_batch = CONFIGS[args.config]
    if args.batch:
        global_batch = args.batch
    if global_batch % world:
        sys.exit(f"fsdp_torch: the world size {world} must divide the global batch {global_batch}")
    batch = global_batch // world
    steps = args.warmup + args.steps
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (steps, global_batch, block + 1), generator=gen)  # (S, B, T + 1)

    resident_before = resident_bytes()
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=VOCAB, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                       dropout=0.0, bias=False)
    model = GPT(config)
    for module in model.modules():
        if isinstance(module, Block):
            fully_shard(module)
    fully_shard(model)
    model.train()
    optimizer = torch.optim.AdamW(model.optimizer_groups(0.1), lr=6e-4, betas=(0.9, 0.95))

    def step(s):
        xy = data[s, rank * batch:(rank + 1) * batch]  # (b, T + 1)
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(xy[:, :-1], xy[:, 1:].contiguous())
        loss.backward()
        optimizer.step()
        return loss.item()

    for s in range(args.warmup):
        step(s)
    dist.barrier()
    step_seconds = []
    loss = 0.0
    for s in range(args.warmup, steps):
        start = time.perf_counter()
        loss = step(s)
        step_seconds.append(time.perf_counter() - start)
    rss = torch.tensor([float(max(peak_resident_bytes(), resident_before) - resident_before)], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        step_seconds.sort()
        n = len(step_seconds)
        step_s = step_seconds[n // 2] if n % 2 else (step_seconds[n // 2 - 1] + step_seconds[n // 2]) / 2
        print(f"fsdp_torch world={world} config={args.config} batch_per_rank={batch} steps={args.steps} "
              f"tok_s={global_batch * block / step_s:.0f} step_ms={step_s * 1e3:.2f} "
              f"rss_peak_mib={rss.item() / 2**20:.2f} loss_last={loss:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2, help="ranks the driver starts (not with RANK set)")
    parser.add_argument("--config", choices=CONFIGS, default="small")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    parser.add_argument("--batch", type=int, default=0, help="the global batch (default: the config's)")
    args = parser.parse_args()
    if args.world < 1 or args.steps < 1 or args.warmup < 0 or args.batch < 0:
        parser.error("--world and --steps must be >= 1, --warmup and --batch >= 0")
    if "RANK" in os.environ:
        run_rank(args)
    else:
        run_self_on_ranks(args.world, "fsdp_torch")


if __name__ == "__main__":
    main()
