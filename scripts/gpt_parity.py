#!/usr/bin/python3
"""PyTorch's side of the GPT parity test (tests/optim/gpt_parity_test.cpp).

Writes, into OUTDIR (the model is scripts/gpt_torch.py's GPT, dropout 0):
  init.safetensors       the initial weights (GPT-2 init, seeded), float32, as
                         torch's state_dict(): both "transformer.wte.weight"
                         and "lm_head.weight" (the tied tensor)
  data.safetensors       BATCHES batches "x.<i>", "y.<i>" (B, T) int64: windows
                         of a token sequence from a random Markov chain, y the
                         next tokens; y.<i>[0, 0] is -1 (ignored by the loss)
  grads.safetensors      in float64, on batch 0 with the initial weights:
                         "logits" (B, T, V), "loss" (), and "grad.<name>" for
                         every parameter of named_parameters()
  losses_float64.txt     the loss of each of STEPS AdamW steps, one per line
  losses_float32.txt     the same in float32
  losses_float32_nudged.txt  the same in float32 from initial weights moved
                         one ulp up (torch.nextafter): PyTorch's own drift
  final_float64.safetensors  the float64 weights after the last step

Training: AdamW over nanoGPT's groups (weight decay 0.1 on the weights of 2+
dims, 0 on the rest), lr 1e-3, betas (0.9, 0.95), eps 1e-8; step s uses batch
s % BATCHES.

With --check-kiln FILE it instead loads FILE (a state dict Kiln saved) into
the model strictly, in the file's dtype, and writes the logits of batch 0 as
OUTDIR/torch_logits_of_kiln.safetensors ("logits").

    /usr/bin/python3 scripts/gpt_parity.py OUTDIR --steps 100
    /usr/bin/python3 scripts/gpt_parity.py OUTDIR --check-kiln OUTDIR/kiln_trained.safetensors
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402
from gpt_torch import GPT, GPTConfig  # noqa: E402


def make_data(config, batches, batch_size):
    # A Markov chain with peaked transitions, so that there is something to learn.
    V, T = config.vocab_size, config.block_size
    transitions = torch.softmax(3.0 * torch.randn(V, V, dtype=torch.float64), dim=1)
    length = batches * batch_size * T + T + 1
    tokens = torch.empty(length, dtype=torch.long)
    tokens[0] = 0
    for i in range(1, length):
        tokens[i] = torch.multinomial(transitions[tokens[i - 1]], 1)[0]
    data = {}
    for b in range(batches):
        starts = torch.randint(0, length - T - 1, (batch_size,))
        data[f"x.{b}"] = torch.stack([tokens[s : s + T] for s in starts])
        y = torch.stack([tokens[s + 1 : s + T + 1] for s in starts])
        y[0, 0] = -1
        data[f"y.{b}"] = y
    return data


def train(model, data, batches, steps):
    opt = torch.optim.AdamW(model.optimizer_groups(0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step in range(steps):
        b = step % batches
        opt.zero_grad(set_to_none=True)
        _, loss = model(data[f"x.{b}"], data[f"y.{b}"])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def write_losses(path, losses):
    with open(path, "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))


def model_from(config, state, dtype):
    model = GPT(config).to(dtype)
    model.load_state_dict(state)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=65)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=32)
    parser.add_argument("--no-bias", action="store_true")
    parser.add_argument("--check-kiln", metavar="FILE")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    os.makedirs(args.outdir, exist_ok=True)
    out = lambda name: os.path.join(args.outdir, name)  # noqa: E731
    config = GPTConfig(vocab_size=args.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd, dropout=0.0, bias=not args.no_bias)

    if args.check_kiln:
        state = safetensors_torch.load_file(args.check_kiln)
        dtype = state["transformer.wte.weight"].dtype
        model = model_from(config, state, dtype)  # strict: every key of nanoGPT's state dict, no other
        data = safetensors_torch.load_file(out("data.safetensors"))
        with torch.no_grad():
            logits, _ = model(data["x.0"])
        safetensors_torch.save_file({"logits": logits.contiguous()}, out("torch_logits_of_kiln.safetensors"))
        return

    model = GPT(config)
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    safetensors_torch.save_file(init, out("init.safetensors"))
    data = make_data(config, args.batches, args.batch_size)
    safetensors_torch.save_file(data, out("data.safetensors"))

    # Logits and every gradient of one batch, in float64.
    model = model_from(config, init, torch.float64)
    logits, loss = model(data["x.0"], data["y.0"])
    loss.backward()
    grads = {"logits": logits.detach().contiguous(), "loss": loss.detach()}
    for name, p in model.named_parameters():
        grads[f"grad.{name}"] = p.grad.contiguous()
    safetensors_torch.save_file(grads, out("grads.safetensors"))

    model = model_from(config, init, torch.float64)
    write_losses(out("losses_float64.txt"), train(model, data, args.batches, args.steps))
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                out("final_float64.safetensors"))

    model = model_from(config, init, torch.float32)
    write_losses(out("losses_float32.txt"), train(model, data, args.batches, args.steps))

    # PyTorch against itself: every initial weight one float32 ulp up.
    model = model_from(config, init, torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.nextafter(p, torch.full_like(p, float("inf"))))
    write_losses(out("losses_float32_nudged.txt"), train(model, data, args.batches, args.steps))


if __name__ == "__main__":
    main()
