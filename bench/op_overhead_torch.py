"""PyTorch's side of bench/op_overhead.cpp: the same workloads, timed the
same way (median of 7 timings of 20000 passes, one thread, float32 tensors
of 4 elements), from Python, as a PyTorch eager user runs them. Prints
    op_overhead workload=add pytorch_us=..
"""
import time

import torch

REPEATS = 7
CALLS = 20000


def microseconds_per_op(run, ops_per_pass):
    run(CALLS // 10)  # warm-up
    timings = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run(CALLS)
        timings.append((time.perf_counter() - start) * 1e6 / (CALLS * ops_per_pass))
    return sorted(timings)[REPEATS // 2]


def main():
    torch.set_num_threads(1)
    a, b = torch.ones(4), torch.ones(4)
    w = torch.ones(4, requires_grad=True)

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
        print(f"op_overhead workload={name} pytorch_us={microseconds_per_op(run, ops):.3f}", flush=True)


if __name__ == "__main__":
    main()
