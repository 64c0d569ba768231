"""The PyTorch anchor of bench/gpt.cpp: the same GPT workloads, timed.

Training: scripts/gpt_torch.py's GPT (nanoGPT's architecture; bias off,
dropout 0, tied LM head; attention through torch's fused
scaled_dot_product_attention) on random token windows (vocab 65, fixed
seed), AdamW (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the 2-d
weights only), float32, zero_grad(set_to_none=True), in one of two modes:
    eager     the model as written
    compile   torch.compile(model); the warm-up steps (the compilation) are
              timed apart and reported as compile_s
Generation: --generate: B prompts of 1 token grown to block_size tokens one
token at a time, greedy, with a key/value cache per layer (what a user of
PyTorch would write for decoding, not nanoGPT's recompute-everything loop).
One line per run:

    gpt_train mode=eager threads=2 tok_s=.. [compile_s=..]
    gpt_generate mode=eager threads=2 tok_s=..

Usage: python bench/gpt_torch.py --config small|baby --mode eager|compile
                                 [--generate] [--threads T] [--steps N] [--device cpu|cuda]
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from gpt_torch import GPT, GPTConfig  # noqa: E402

CONFIGS = {
    # name: (n_layer, n_head, n_embd, block_size, batch)
    "small": (4, 4, 128, 128, 32),
    "baby": (6, 6, 384, 256, 64),
}
VOCAB = 65
WARMUP_STEPS = 3


def make_model(args, n_layer, n_head, n_embd, block):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=VOCAB, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                       dropout=0.0, bias=False)
    return GPT(config).to(args.device)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def train(args, n_layer, n_head, n_embd, block, batch):
    model = make_model(args, n_layer, n_head, n_embd, block)
    opt = torch.optim.AdamW(model.optimizer_groups(0.1), lr=6e-4, betas=(0.9, 0.95))
    step_fn = torch.compile(model) if args.mode == "compile" else model
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (args.steps + WARMUP_STEPS, batch, block + 1), generator=gen)

    def step(i):
        xy = data[i].to(args.device)
        _, loss = step_fn(xy[:, :-1], xy[:, 1:].contiguous())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    start = time.perf_counter()
    for i in range(WARMUP_STEPS):
        step(i)
    sync(args.device)
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(args.steps):
        step(WARMUP_STEPS + i)
    sync(args.device)
    elapsed = time.perf_counter() - start
    extra = f" compile_s={warmup_s:.1f}" if args.mode == "compile" else ""
    print(f"gpt_train mode={args.mode} threads={torch.get_num_threads()} "
          f"tok_s={args.steps * batch * block / elapsed:.0f}{extra}", flush=True)


@torch.no_grad()
def generate(args, n_layer, n_head, n_embd, block, batch):
    model = make_model(args, n_layer, n_head, n_embd, block).eval()

    def run():
        caches = [{} for _ in range(n_layer)]
        idx = torch.zeros((batch, 1), dtype=torch.long, device=args.device)
        logits, _ = model(idx, caches=caches)
        for _ in range(1, block):
            idx = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            logits, _ = model(idx, caches=caches)

    run()  # warm-up
    sync(args.device)
    start = time.perf_counter()
    for _ in range(args.repeats):
        run()
    sync(args.device)
    elapsed = time.perf_counter() - start
    print(f"gpt_generate mode=eager threads={torch.get_num_threads()} "
          f"tok_s={args.repeats * batch * (block - 1) / elapsed:.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=CONFIGS, default="small")
    parser.add_argument("--mode", choices=["eager", "compile"], default="eager")
    parser.add_argument("--generate", action="store_true")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="overrides the config's batch")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    n_layer, n_head, n_embd, block, batch = CONFIGS[args.config]
    if args.batch > 0:
        batch = args.batch
    if args.generate:
        generate(args, n_layer, n_head, n_embd, block, batch)
    else:
        train(args, n_layer, n_head, n_embd, block, batch)


if __name__ == "__main__":
    main()
