"""PyTorch's side of bench/op_overhead.cpp: the same workloads, timed the
same way (median of 7 timings of --calls passes, 20000 unless told, one thread, float32 tensors
of 4 elements, on the CPU or with --device cuda on the first GPU, each
timing ended when the GPU has finished), from Python, as a PyTorch eager
user runs them. Prints
    op_overhead workload=add pytorch_us=..
"""
import argparse
import time

import torch

REPEATS = 7


def microseconds_per_op(run, ops_per_pass, finish, calls):
    run(calls // 10)  # warm-up
    finish()
    timings = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run(calls)
        finish()
        timings.append((time.perf_counter() - start) * 1e6 / (calls * ops_per_pass))
    return sorted(timings)[REPEATS // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--calls", type=int, default=20000, help="passes per timing")
    args = parser.parse_args()
    device, calls = args.device, args.calls
    torch.set_num_threads(1)
    a, b = torch.ones(4, device=device), torch.ones(4, device=device)
    w = torch.ones(4, device=device, requires_grad=True)

    def finish():
        if device == "cuda":
            torch.cuda.synchronize()

    def add(n):
        for _ in range(n):
            torch.add(a, b)

    def mul_grad(n):
        for _ in range(n):
            torch.mul(w, b)

    def chain_back(n):
        for _ in range(n):
            h = w
            for _ in range(10):
                h = torch.mul(h, b)
            h.sum().backward()

    for name, run, ops in (("add", add, 1), ("mul_grad", mul_grad, 1), ("chain_back", chain_back, 12)):
        print(f"op_overhead workload={name} pytorch_us={microseconds_per_op(run, ops, finish, calls):.3f}", flush=True)


if __name__ == "__main__":
    main()
