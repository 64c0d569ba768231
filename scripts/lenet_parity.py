#!/usr/bin/python3
"""PyTorch's side of the LeNet parity test (tests/optim/lenet_parity_test.cpp).

Writes, into OUTDIR:
  init.safetensors    the initial LeNet weights (PyTorch's default init, seeded)
  data.safetensors    BATCHES batches: "x.<i>" (64, 3, 32, 32) float32, "y.<i>" (64,) int64
  losses_<opt>_<dtype>.txt    the loss of each of STEPS training steps, one per line
  final_<opt>_<dtype>.safetensors  the weights after the last step

Training cycles through the batches in order: step s uses batch s % BATCHES.
SGD uses lr 0.01, momentum 0.9; Adam uses lr 0.001 and torch's defaults.
With --dtype float64 the model and batches are converted to float64 first
(the files still hold the float32 originals).
Kiln loads the same weights and batches, trains the same way and compares.

    /usr/bin/python3 scripts/lenet_parity.py OUTDIR --optimizer sgd --steps 200
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402
from lenet_torch import LeNet  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    os.makedirs(args.outdir, exist_ok=True)

    net = LeNet()
    safetensors_torch.save_file({k: v.contiguous() for k, v in net.state_dict().items()},
                                os.path.join(args.outdir, "init.safetensors"))

    # Inputs roughly like normalised CIFAR images; labels depend on the input
    # (the sign of a few pixel sums) so that there is something to learn.
    data = {}
    for i in range(args.batches):
        x = torch.randn(args.batch_size, 3, 32, 32)
        y = ((x[:, 0, :8, :8].sum((1, 2)) > 0).long() * 5 + (x[:, 1, 8:16, 8:16].sum((1, 2)) > 0).long() * 2
             + (x[:, 2].mean((1, 2)) > 0).long())
        data[f"x.{i}"] = x
        data[f"y.{i}"] = y
    safetensors_torch.save_file(data, os.path.join(args.outdir, "data.safetensors"))

    dtype = getattr(torch, args.dtype)
    net = net.to(dtype)
    data = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in data.items()}
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=0.001)
    losses = []
    for step in range(args.steps):
        b = step % args.batches
        opt.zero_grad()
        loss = F.cross_entropy(net(data[f"x.{b}"]), data[f"y.{b}"])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(args.outdir, f"losses_{args.optimizer}_{args.dtype}.txt"), "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))
    safetensors_torch.save_file({k: v.contiguous() for k, v in net.state_dict().items()},
                                os.path.join(args.outdir, f"final_{args.optimizer}_{args.dtype}.safetensors"))


if __name__ == "__main__":
    main()
