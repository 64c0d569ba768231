"""The PyTorch anchor of bench/pipeline.cpp: GPT training in pipeline stages with torch.distributed.pipelining, timed.

The same workload as bench/pipeline.cpp: scripts/gpt_torch.py's GPT
(nanoGPT's architecture) of bench's small config (4 layers, 4 heads, width
128, block 128; bias off, dropout 0, tied LM head, vocabulary 65) on random
token windows (generator seeded 1, the same windows on every rank), a global
batch of --batch windows (default 32) per step cut into --micro-batches
micro-batches (default 8), AdamW (lr 6e-4, betas (0.9, 0.95), weight decay
0.1 on the 2-d weights only), float32, zero_grad(set_to_none=True), no
gradient clipping, gloo on the CPU, torch.set_num_threads(1) in every rank.

The split is Kiln's (nn::gpt::split_into_stages with even_balance): every
rank builds the whole model from the same seed and keeps its stages; S
stages over the 4 blocks as evenly as possible, the first stages taking the
extra ones (2 stages: blocks 0-1 and 2-3; 4 stages: one block each). Stage 0
also embeds the tokens (wte, wpe), the last also applies ln_f and the LM
head. Each stage is a torch.distributed.pipelining.PipelineStage on the
CPU, and the schedules are:

    --schedule gpipe        ScheduleGPipe               1 stage per rank
    --schedule 1f1b         Schedule1F1B                1 stage per rank
    --schedule interleaved  ScheduleInterleaved1F1B     2 stages per rank, stage s on rank s % world
    --schedule zero-bubble  ScheduleInterleavedZeroBubble with 1 stage per rank
                            (ZB1P; with one stage per rank its order is the
                            zero-bubble 1F1B whose W fills idle time, as
                            Kiln's ZB-H1), or --zero-bubble zbv:
                            ScheduleZBVZeroBubble, which needs 2 stages per
                            rank in a V (stages r and 2 world - 1 - r)

Schedule1F1B needs micro_batches >= stages; ScheduleInterleaved1F1B and
ScheduleInterleavedZeroBubble need micro_batches to be a multiple of
max(1, micro_batches // world).

Tied weights. torch.distributed.pipelining has no notion of a parameter
held by two stages: on different ranks the token embedding (stage 0) and
the LM head (the last stage) are two copies that would drift apart. This
script ties them by hand, as Kiln's Pipeline does (PipelineOptions::tied):
both start equal (one tensor in the model every rank builds), and after each
schedule.step() the two holders all-reduce (sum) the copies' gradients, so
both hold the embedding's plus the head's gradient and the same AdamW update
keeps them equal. The head is not untied: both frameworks train the same
model with the same per-step communication.

--warmup steps run first; then --steps steps, each timed on rank 0 from its
start to the end of its optimizer step; tok_s is the global tokens of one
step over the median step time. Rank 0 prints one line:

    pipeline_torch schedule=1f1b stages=2 micro_batches=8 batch=32 steps=20 tok_s=.. step_ms=.. loss_last=..

The ranks start either way:
- without RANK in the environment it starts --world processes of itself,
  which meet through init_method="file://..." in a temporary folder;
- with RANK set (torchrun's environment) it is that rank and meets through env://.

Usage: python bench/pipeline_torch.py [--schedule gpipe|1f1b|interleaved|zero-bubble] [--micro-batches M]
                                      [--batch B] [--steps N] [--warmup N] [--world N] [--zero-bubble zb1p|zbv]
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from gpt_torch import GPT, GPTConfig  # noqa: E402
from rank_processes import bind_to_core_share, init_rank_process_group, run_self_on_ranks  # noqa: E402

from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining.schedules import (  # noqa: E402
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

# bench's small config (bench/gpt_configs.h): n_layer, n_head, n_embd, block_size
N_LAYER, N_HEAD, N_EMBD, BLOCK = 4, 4, 128, 128
VOCAB = 65
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero-bubble")


class GPTStage(nn.Module):
    """Stage `index` of `num_stages` of `model`, holding blocks [first, first + count): Kiln's nn::gpt::Stage.
    Stage 0 takes idx (B, T) and returns x (B, T, E), a middle stage x -> x, the last x -> logits (B, T, V)."""

    def __init__(self, model, index, num_stages, first, count):
        super().__init__()
        self.first, self.last = index == 0, index == num_stages - 1
        if self.first:
            self.wte, self.wpe, self.drop = model.transformer.wte, model.transformer.wpe, model.transformer.drop
        self.h = nn.ModuleList(model.transformer.h[first:first + count])
        if self.last:
            self.ln_f, self.lm_head = model.transformer.ln_f, model.lm_head

    def forward(self, x):
        if self.first:
            pos = torch.arange(x.size(1), dtype=torch.long, device=x.device)
            x = self.drop(self.wte(x) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        if self.last:
            x = self.lm_head(self.ln_f(x))
        return x


def even_balance(n_layer, num_stages):
    """Kiln's nn::gpt::even_balance: the first n_layer % num_stages stages get one block more."""
    base, extra = divmod(n_layer, num_stages)
    return [base + (1 if s < extra else 0) for s in range(num_stages)]


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def run_rank(args):
    if args.bind_cores:
        bind_to_core_share(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    torch.set_num_threads(1)
    init_rank_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    steps = args.warmup + args.steps
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (steps, args.batch, BLOCK + 1), generator=gen)  # (S, B, T + 1)

    # Which rank holds each stage.
    if args.schedule == "interleaved":
        num_stages = 2 * world
        stage_rank = {s: s % world for s in range(num_stages)}
    elif args.schedule == "zero-bubble" and args.zero_bubble == "zbv":
        num_stages = 2 * world  # the V: rank r holds stages r and 2 world - 1 - r
        stage_rank = {s: s if s < world else 2 * world - 1 - s for s in range(num_stages)}
    else:
        num_stages = world
        stage_rank = {s: s for s in range(num_stages)}
    mine = [s for s in range(num_stages) if stage_rank[s] == rank]

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD,
                       dropout=0.0, bias=False)
    model = GPT(config)  # every rank the same weights; each keeps its stages
    balance = even_balance(N_LAYER, num_stages)
    firsts = [sum(balance[:s]) for s in range(num_stages)]
    modules = {s: GPTStage(model, s, num_stages, firsts[s], balance[s]) for s in mine}
    del model
    for module in modules.values():
        module.train()
    device = torch.device("cpu")
    stages = [PipelineStage(modules[s], s, num_stages, device) for s in mine]

    n = args.micro_batches
    if args.schedule == "gpipe":
        schedule = ScheduleGPipe(stages[0], n, loss_fn=loss_fn)
    elif args.schedule == "1f1b":
        schedule = Schedule1F1B(stages[0], n, loss_fn=loss_fn)
    elif args.schedule == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n, loss_fn=loss_fn)
    elif args.zero_bubble == "zbv":
        schedule = ScheduleZBVZeroBubble(stages, n, loss_fn=loss_fn)
    else:
        schedule = ScheduleInterleavedZeroBubble(stages, n, loss_fn=loss_fn)

    # This rank's parameters, each once; the tied embedding / head copies on two ranks (the module docstring).
    params = list({id(p): p for m in modules.values() for p in m.parameters()}.values())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95))
    first_rank, last_rank = stage_rank[0], stage_rank[num_stages - 1]
    tied = None
    if 0 in modules:
        tied = modules[0].wte.weight
    elif num_stages - 1 in modules:
        tied = modules[num_stages - 1].lm_head.weight
    tied_group = None
    if first_rank != last_rank:
        holders = sorted({first_rank, last_rank})
        tied_group = dist.new_group(holders) if holders != list(range(world)) else dist.group.WORLD

    def step(s):
        xy = data[s]  # (B, T + 1)
        optimizer.zero_grad(set_to_none=True)
        inputs = (xy[:, :-1].contiguous(),) if first_rank == rank else ()
        target = xy[:, 1:].contiguous() if last_rank == rank else None
        losses = [] if last_rank == rank else None
        schedule.step(*inputs, target=target, losses=losses, return_outputs=False)
        if tied_group is not None and tied is not None:
            dist.all_reduce(tied.grad, group=tied_group)  # the embedding's gradient plus the head's
        optimizer.step()
        return torch.stack(losses).mean().item() if losses else 0.0

    for s in range(args.warmup):
        step(s)
    dist.barrier()
    step_seconds = []
    loss = 0.0
    for s in range(args.warmup, steps):
        start = time.perf_counter()
        loss = step(s)
        step_seconds.append(time.perf_counter() - start)
    last_loss = torch.tensor([loss if last_rank == rank else 0.0], dtype=torch.float64)
    dist.all_reduce(last_loss)
    if rank == 0:
        step_seconds.sort()
        k = len(step_seconds)
        step_s = step_seconds[k // 2] if k % 2 else (step_seconds[k // 2 - 1] + step_seconds[k // 2]) / 2
        name = args.schedule + ("-zbv" if args.schedule == "zero-bubble" and args.zero_bubble == "zbv" else "")
        print(f"pipeline_torch schedule={name} stages={num_stages} micro_batches={n} batch={args.batch} "
              f"steps={args.steps} tok_s={args.batch * BLOCK / step_s:.0f} step_ms={step_s * 1e3:.2f} "
              f"loss_last={last_loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    parser.add_argument("--zero-bubble", choices=("zb1p", "zbv"), default="zb1p",
                        help="PyTorch's zero-bubble schedule: ScheduleInterleavedZeroBubble with 1 stage per rank "
                             "(zb1p) or ScheduleZBVZeroBubble with 2 (zbv)")
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32, help="the global batch")
    parser.add_argument("--world", type=int, default=2, help="ranks the driver starts (not with RANK set)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    parser.add_argument("--bind-cores", action="store_true",
                        help="bind each rank to its share of the cores, as kiln-run --bind-cores does")
    args = parser.parse_args()
    if args.world < 1 or args.steps < 1 or args.warmup < 0 or not 1 <= args.micro_batches <= args.batch:
        parser.error("--world and --steps must be >= 1, --warmup >= 0, 1 <= --micro-batches <= --batch")
    if "RANK" in os.environ:
        run_rank(args)
    else:
        run_self_on_ranks(args.world, "pipeline_torch")


if __name__ == "__main__":
    main()
