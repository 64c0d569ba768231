#!/usr/bin/python3
"""The PyTorch anchor of bench/lenet.cpp: the same LeNet-5 workload, timed.

Training: SGD (lr 0.01, momentum 0.9), batch 64, float32, one pass over the
first floor(N / 64) * 64 of N in-memory images, zero_grad(set_to_none=True).
Evaluation: M images in batches of 1000 under torch.no_grad(), model.eval().
Images are N(0, 1) noise, labels uniform in [0, 10), from a fixed seed. The
training pass is timed once after a few warm-up steps; the evaluation pass,
much shorter and so more exposed to a noisy machine, is timed EVAL_PASSES
times and reports the median, as bench/lenet.cpp does. One line per (pass, threads):

    lenet_train pytorch_threads=1 pytorch_img_s=..
    lenet_eval pytorch_threads=1 pytorch_img_s=..

With --device cuda it trains instead on the GPU, one pass over the N images
(resident on the device) per batch size of --batch, and prints
    lenet_train_cuda batch=64 pytorch_img_s=..

Usage: /usr/bin/python3 bench/lenet_torch.py [--threads T] [--train-images N] [--eval-images M]
                                             [--device cpu|cuda] [--batch B ...]
       (default: threads 1 and 2, N = M = 10000; batches 64 and 512)
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from lenet_torch import LeNet  # noqa: E402

TRAIN_BATCH = 64
EVAL_BATCH = 1000
WARMUP_STEPS = 5
EVAL_PASSES = 5


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def time_training(model, optimizer, images, labels, steps):
    model.train()

    def step(s):
        x = images[s * TRAIN_BATCH:(s + 1) * TRAIN_BATCH]
        y = labels[s * TRAIN_BATCH:(s + 1) * TRAIN_BATCH]
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for s in range(WARMUP_STEPS):
        step(s)
    start = time.perf_counter()
    for s in range(steps):
        step(s)
    return steps * TRAIN_BATCH / (time.perf_counter() - start)


def time_evaluation(model, images, batches):
    model.eval()
    with torch.no_grad():
        model(images[:EVAL_BATCH]).argmax(1)
        rates = []
        for _ in range(EVAL_PASSES):
            start = time.perf_counter()
            for b in range(batches):
                model(images[b * EVAL_BATCH:(b + 1) * EVAL_BATCH]).argmax(1)
            rates.append(batches * EVAL_BATCH / (time.perf_counter() - start))
        return sorted(rates)[EVAL_PASSES // 2]


def time_training_cuda(model, optimizer, images, labels, batch):
    """One pass over `images` (resident on the GPU) in batches of `batch`, synchronized at both ends."""
    model.train()
    steps = images.shape[0] // batch

    def step(s):
        x = images[s * batch:(s + 1) * batch]
        y = labels[s * batch:(s + 1) * batch]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for s in range(WARMUP_STEPS):
        step(s % steps)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for s in range(steps):
        loss = step(s)
    loss.item()
    return steps * batch / (time.perf_counter() - start)


def load_cifar(root, train, n):
    """CIFAR-10's binary format (records of 1 label byte + 3072 pixel bytes), normalized."""
    import numpy as np

    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
    folder = os.path.join(root, "cifar-10-batches-bin")
    if not os.path.isdir(folder):
        folder = root
    records = np.concatenate([np.fromfile(os.path.join(folder, name), dtype=np.uint8) for name in names])
    records = records.reshape(-1, 3073)[:n]
    if len(records) < n:
        sys.exit(f"lenet_torch: {root} holds {len(records)} images, fewer than the {n} asked for")
    labels = torch.from_numpy(records[:, 0].astype(np.int64))
    x = torch.from_numpy(records[:, 1:].copy()).view(-1, 3, 32, 32).float() / 255.0
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous(), labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--train-images", type=int, default=10000)
    parser.add_argument("--eval-images", type=int, default=10000)
    parser.add_argument("--cifar", help="a CIFAR-10 binary folder (default: synthetic data)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, nargs="*", default=[64, 512], help="batch sizes for --device cuda")
    args = parser.parse_args()
    if args.train_images < TRAIN_BATCH or args.eval_images < EVAL_BATCH:
        parser.error(f"--train-images must be >= {TRAIN_BATCH} and --eval-images >= {EVAL_BATCH}")

    train_n = max(args.train_images, WARMUP_STEPS * TRAIN_BATCH)
    if args.cifar:
        train_images, train_labels = load_cifar(args.cifar, True, train_n)
        eval_images, _ = load_cifar(args.cifar, False, args.eval_images)
    else:
        train_images, train_labels = make_data(train_n, 1)
        eval_images, _ = make_data(args.eval_images, 2)
    if args.device == "cuda":
        # Full float32 arithmetic, as Kiln's (TF32 is an explicit setting
        # there, off by default): PyTorch's cuDNN would otherwise round the
        # convolutions' inputs to TF32 on an H100.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        images = train_images[:args.train_images].cuda()
        labels = train_labels[:args.train_images].cuda()
        for batch in args.batch:
            torch.manual_seed(0)
            model = LeNet().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            img_s = time_training_cuda(model, optimizer, images, labels, batch)
            print(f"lenet_train_cuda batch={batch} pytorch_img_s={img_s:.0f}", flush=True)
        return
    for threads in args.threads:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        model = LeNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        img_s = time_training(model, optimizer, train_images, train_labels, args.train_images // TRAIN_BATCH)
        print(f"lenet_train pytorch_threads={threads} pytorch_img_s={img_s:.0f}", flush=True)
        img_s = time_evaluation(model, eval_images, args.eval_images // EVAL_BATCH)
        print(f"lenet_eval pytorch_threads={threads} pytorch_img_s={img_s:.0f}", flush=True)


if __name__ == "__main__":
    main()
